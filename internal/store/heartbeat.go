package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/tetherjobs/tether/internal/dbhistory"
	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/queries"
)

// Held is one lease the heartbeat confirmed, with the job's current status.
type Held struct {
	JobID  string
	Lease  int64
	Status jobstate.JobStatus
}

// HeartbeatResult is the answer to one heartbeat.
type HeartbeatResult struct {
	// Registered is false when this process's agents row was not renewed;
	// nothing was then, and Held is empty whatever the leases are.
	Registered bool
	// Missing, when Registered is false, says the name has no agents row at
	// all (an operator or agent retention deleted it). The process registers
	// again (RegisterAgain) and carries on. Otherwise another process
	// registered under the name since, and this process must stop.
	Missing bool
	Held    []Held
	// Orphans are leases the database says this generation holds that the
	// call did not list (and that are not detached). Such a lease is a claim
	// whose answer was lost, or one committed while the list was being made.
	Orphans []Lease
	// Position is where the server's history was when it answered
	// (dbhistory.Position). A failover or lost commits show in it.
	Position dbhistory.Position
	// DrainRequested says an operator asked this agent to drain
	// (RequestDrain). It drains as on SIGTERM.
	DrainRequested bool
}

// Lease is one job an agent believes it holds.
type Lease struct {
	JobID string
	Lease int64
}

// Heartbeat renews the agent's row, which renews every lease it holds, and
// reads back which of leases it still holds (with their status) and which
// other leases the database says it holds (Orphans). It writes one row
// however many leases there are.
func (s *Store) Heartbeat(ctx context.Context, h Holder, leases []Lease) (HeartbeatResult, error) {
	ids := make([]string, len(leases))
	nums := make([]int64, len(leases))
	for i, l := range leases {
		ids[i], nums[i] = l.JobID, l.Lease
	}
	st := queries.Named("heartbeat")
	rows, err := QueryHot(ctx, s.pool, st.SQL, st.Args(map[string]any{
		"name": h.Name, "generation": h.Generation, "job_ids": ids, "leases": nums})...)
	if err != nil {
		return HeartbeatResult{}, fmt.Errorf("heartbeat: %w", err)
	}
	var res HeartbeatResult
	var named bool // the name has a row, of any generation
	var lsn, timeline string
	var id, status *string
	var lease *int64
	var orphan *bool
	_, err = pgx.ForEachRow(rows, []any{&res.Registered, &named, &id, &lease, &status, &orphan, &lsn, &timeline, &res.DrainRequested}, func() error {
		switch {
		case id == nil:
		case *orphan:
			res.Orphans = append(res.Orphans, Lease{JobID: *id, Lease: *lease})
		default:
			res.Held = append(res.Held, Held{JobID: *id, Lease: *lease, Status: jobstate.JobStatus(*status)})
		}
		return nil
	})
	if err != nil {
		return HeartbeatResult{}, fmt.Errorf("heartbeat: %w", err)
	}
	res.Missing = !res.Registered && !named
	if res.Position, err = dbhistory.ParsePosition(lsn, timeline); err != nil {
		return HeartbeatResult{}, fmt.Errorf("heartbeat: %w", err)
	}
	return res, nil
}

// Detach stops the agents row from renewing a lease its holder's process does
// not know it holds (an orphan on consecutive heartbeats). The janitor then
// judges it by its claim time. It is fenced by holder and lease. It reports
// whether the row still matched.
func (s *Store) Detach(ctx context.Context, h Holder, l Lease) (bool, error) {
	st := queries.Named("lease_detach")
	tag, err := s.pool.Exec(ctx, st.SQL, st.Args(map[string]any{
		"job_id": l.JobID, "lease": l.Lease, "name": h.Name, "generation": h.Generation})...)
	if err != nil {
		return false, fmt.Errorf("detaching lease %d of job %s: %w", l.Lease, l.JobID, err)
	}
	return tag.RowsAffected() == 1, nil
}
