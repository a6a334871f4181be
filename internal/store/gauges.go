package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/queries"
)

// QueueStat is the backlog of one command.
type QueueStat struct {
	Command string
	Jobs    int           // due, unowned jobs, at most the count's cap
	Oldest  time.Duration // how long the oldest of them has been due
	Agents  int           // live agents claiming the command
}

// QueueStats measures the due, unowned jobs of each command (at most limit
// of them), how long the oldest has waited, and the live agents (those of
// live, as internal/fleet.Classify counts them) claiming it, with JIT off
// (queries/queue_stats.sql reads the head of one index range per command).
func QueueStats(ctx context.Context, db Batcher, commands, live []string, limit int) ([]QueueStat, error) {
	st := queries.Named("queue_stats")
	rows, err := QueryHot(ctx, db, st.SQL, st.Args(map[string]any{
		"commands": commands, "live_names": nonNil(live), "cap": limit})...)
	if err != nil {
		return nil, fmt.Errorf("measuring the queue: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueueStat, error) {
		var q QueueStat
		var oldest float64
		err := r.Scan(&q.Command, &q.Jobs, &oldest, &q.Agents)
		q.Oldest = secondsDuration(oldest)
		return q, err
	})
	if err != nil {
		return nil, fmt.Errorf("measuring the queue: %w", err)
	}
	return out, nil
}
