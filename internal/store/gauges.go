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

// QueueParams say what QueueStats measures.
type QueueParams struct {
	// Commands are measured whatever the database holds (the configured
	// ones). Every command an agents row announces or with unowned jobs is
	// measured too, MaxCommands in all at most (Commands first).
	Commands    []string
	MaxCommands int
	Live        []string // the live agents, as internal/fleet.Classify counts them
	Cap         int      // the most due jobs counted per command
}

// QueueStats measures, for every command the database knows (see
// QueueParams), the due, unowned jobs (at most p.Cap of them), how long the
// oldest has waited, and the live agents (of p.Live) claiming it, in one
// statement with JIT off (queries/queue_stats.sql reads the head of one
// index range per command).
func QueueStats(ctx context.Context, db Batcher, p QueueParams) ([]QueueStat, error) {
	st := queries.Named("queue_stats")
	rows, err := QueryHot(ctx, db, st.SQL, st.Args(map[string]any{
		"commands": p.Commands, "max_commands": p.MaxCommands, "live_names": nonNil(p.Live), "cap": p.Cap})...)
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
