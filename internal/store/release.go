package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/queries"
)

// Release gives up a job this holder leases without finishing it. The job
// stays running, becomes claimable at once, and the next holder resumes it.
// ErrLeaseLost means someone else already holds it.
func (s *Store) Release(ctx context.Context, h Holder, jobID string, lease int64, reason string) error {
	released, err := s.ReleaseMany(ctx, h, []Lease{{JobID: jobID, Lease: lease}}, reason)
	if err != nil {
		return err
	}
	if !released[jobID] {
		return ErrLeaseLost
	}
	return nil
}

// ReleaseMany releases many leases in one fenced statement and returns the
// IDs it released. The others had already been taken over.
func (s *Store) ReleaseMany(ctx context.Context, h Holder, leases []Lease, reason string) (map[string]bool, error) {
	ids := make([]string, len(leases))
	nums := make([]int64, len(leases))
	for i, l := range leases {
		ids[i], nums[i] = l.JobID, l.Lease
	}
	rows, err := s.pool.Query(ctx, queries.Get("job_release"), ids, nums, h.Name, h.Generation, reason)
	if err != nil {
		return nil, fmt.Errorf("releasing %d jobs: %w", len(leases), err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("releasing %d jobs: %w", len(leases), err)
	}
	out := make(map[string]bool, len(got))
	for _, id := range got {
		out[id] = true
	}
	return out, nil
}
