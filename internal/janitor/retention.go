package janitor

import (
	"context"
	"time"
)

// Retention's defaults (Config): 500 jobs a statement, at most 1000
// statements a pass, for at most half of clean_interval.
const (
	defaultRetentionBatch      = 500
	defaultRetentionMaxBatches = 1000
	retentionBudgetShare       = 2
)

// Retention deletes terminal jobs past their stamped ttl (expires_at), with
// their events and logs, RetentionBatch per statement, while batches come
// back full, for at most RetentionBudget and RetentionMaxBatches statements
// per call. It returns how many it deleted.
func (s *Service) Retention(ctx context.Context) (int, error) {
	st := s.store
	total := 0
	start := time.Now()
	for range s.cfg.RetentionMaxBatches {
		if time.Since(start) >= s.cfg.RetentionBudget {
			break
		}
		n, err := st.DeleteExpired(ctx, s.cfg.RetentionBatch)
		total += n
		s.deleted.Add(float64(n))
		if err != nil {
			return total, err
		}
		if n < s.cfg.RetentionBatch {
			break
		}
	}
	if total > 0 {
		s.log.Info("retention deleted expired jobs", "jobs", total)
	}
	return total, nil
}
