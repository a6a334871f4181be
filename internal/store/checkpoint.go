package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/queries"
)

// Checkpoint stores a job's resumable handle, fenced by lease, with no
// output to store alongside (see CheckpointWithOutput).
func (s *Store) Checkpoint(ctx context.Context, jobID string, lease int64, handle []byte) error {
	return s.CheckpointWithOutput(ctx, LogBatch{JobID: jobID, Lease: lease}, 0, handle)
}

// CheckpointWithOutput stores a job's output written since its last
// checkpoint and its new handle in one transaction, fenced by lease. A handle
// that points past output (a log position) is never stored without that
// output, and the output never without the handle, so a resuming agent
// neither skips nor copies a line. ErrLeaseLost means nothing was stored.
func (s *Store) CheckpointWithOutput(ctx context.Context, out LogBatch, maxPerStream int64, handle []byte) error {
	return s.CheckpointDescribed(ctx, out, maxPerStream, handle, nil)
}

// CheckpointDescribed is CheckpointWithOutput that also records, under the
// same fence, what the plugin said the handle points at (a remote event, when
// it changed, see recordRemote). described nil records nothing.
func (s *Store) CheckpointDescribed(ctx context.Context, out LogBatch, maxPerStream int64, handle []byte, described *Described) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := checkNoGap(ctx, tx, out); err != nil {
			return err // a handle past output the database lost is never stored
		}
		if len(out.Records) > 0 || len(out.Stdout) > 0 || len(out.Stderr) > 0 {
			held, err := appendLogs(ctx, tx, []LogBatch{out}, maxPerStream)
			if err != nil {
				return err
			}
			if !held[out.JobID] {
				return ErrLeaseLost
			}
		}
		st := queries.Named("job_checkpoint")
		tag, err := tx.Exec(ctx, st.SQL, st.Args(map[string]any{
			"job_id": out.JobID, "lease": out.Lease, "handle": handle, "generation": out.Generation})...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrLeaseLost
		}
		return recordRemote(ctx, tx, out.JobID, out.Lease, described)
	})
	if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrOutputGap) {
		return err
	}
	if err != nil {
		return fmt.Errorf("checkpointing job %s: %w", out.JobID, err)
	}
	return nil
}
