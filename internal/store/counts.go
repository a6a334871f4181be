package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/queries"
)

// StatusCount is how many jobs have one status.
type StatusCount = api.StatusCount

// CountJobs counts the jobs matching p's command, submitter, agent and
// created_at window per status, reading at most about cap rows per part
// (queries/job_counts.sql), with JIT off; a count past cap is flagged
// AtLeast. Every
// status is in the answer, in lifecycle order, zero when none.
func (s *Store) CountJobs(ctx context.Context, p ListParams, limit int) ([]StatusCount, error) {
	args := filterArgs(p)
	args["cap"] = limit
	st := queries.Named("job_counts")
	// JIT off: at a large table the estimate passes jit_above_cost, and
	// compiling (≈ 300 ms measured) costs more than the bounded read.
	rows, err := QueryHot(ctx, s.pool, st.SQL, st.Args(args)...)
	if err != nil {
		return nil, fmt.Errorf("counting jobs: %w", err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StatusCount, error) {
		var c StatusCount
		err := r.Scan(&c.Status, &c.Count, &c.AtLeast)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("counting jobs: %w", err)
	}
	out := make([]StatusCount, 0, len(jobstate.Statuses()))
	for _, status := range jobstate.Statuses() {
		c := StatusCount{Status: status}
		for _, g := range got {
			if g.Status == status {
				c = g
			}
		}
		out = append(out, c)
	}
	return out, nil
}
