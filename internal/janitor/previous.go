package janitor

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherjobs/tether/internal/defaults"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// ReleasePrevious settles, before the agent claims anything, every job an
// earlier generation of holder.Name still holds. An accepted job is requeued.
// A running one that a live agent or this process can resume is released
// "agent restarted". Any other running one is failed "agent restarted" with a
// Cleanup queued. A canceling one is canceled (Cleanup queued if the plugin
// ran). caps reports this process's plugins. It counts for every command they
// can run (see ReleasePreviousWith to name its commands). It returns how many
// jobs it settled.
func ReleasePrevious(ctx context.Context, pool *pgxpool.Pool, holder store.Holder, caps func(plugin string) (plugin.Info, bool)) (int, error) {
	return ReleasePreviousWith(ctx, pool, PreviousConfig{Holder: holder, Caps: caps})
}

// PreviousConfig says who is starting, for ReleasePreviousWith.
type PreviousConfig struct {
	Holder store.Holder // this process: its name and new generation
	// Caps reports this process's plugins.
	Caps func(plugin string) (plugin.Info, bool)
	// Commands are the commands this process serves. nil counts it for every
	// command whose plugin it has.
	Commands []string
	// StaleJob is the live-agent window (agent.stale_job, 120s).
	StaleJob time.Duration
}

// ReleasePreviousWith is ReleasePrevious. Whether a running job can be
// resumed is judged from the live agents that serve its command — another
// agent may resume it although this process lost the plugin — and from this
// process (Caps, for Commands). The earlier generation's own agents row does
// not count. It is the process being replaced.
func ReleasePreviousWith(ctx context.Context, pool *pgxpool.Pool, p PreviousConfig) (int, error) {
	defaults.Fill(&p.StaleJob, defaultStaleJob)
	if p.Caps == nil {
		p.Caps = func(string) (plugin.Info, bool) { return plugin.Info{}, false }
	}
	var served map[string]bool
	if p.Commands != nil {
		served = setOf(p.Commands)
	}
	st := store.New(pool)
	total := 0
	q := store.PreviousQuery{Self: p.Holder, Batch: previousBatch, StaleJob: p.StaleJob}
	for {
		n, last, full, err := releasePreviousPage(ctx, st, q, p.Caps, served)
		if err != nil {
			return total, fmt.Errorf("releasing jobs of earlier generations of %s: %w", p.Holder.Name, err)
		}
		total += n
		if !full {
			return total, nil
		}
		q.After = last
	}
}

// previousBatch is how many jobs of earlier generations one transaction
// settles.
const previousBatch = 100

// releasePreviousPage settles one page of the jobs earlier generations of
// q.Self.Name hold. It returns how many it settled, the last job ID of the
// page and whether the page was full.
func releasePreviousPage(ctx context.Context, st *store.Store, q store.PreviousQuery, caps func(string) (plugin.Info, bool), served map[string]bool) (int, string, bool, error) {
	var n int
	var last string
	var full bool
	err := st.InJanitorTx(ctx, DefaultIdleInTransaction, func(tx store.JanitorTx) error {
		n = 0
		rows, err := tx.PreviousCandidates(ctx, q)
		if err != nil {
			return err
		}
		full = len(rows) == q.Batch
		if len(rows) > 0 {
			last = rows[len(rows)-1].JobID
		}
		for _, r := range rows {
			c := candidateOf(r)
			// The name now belongs to this generation, registered or not yet.
			c.Input.Owner = Owner{Exists: true, Generation: q.Self.Generation, State: "running"}
			countSelf(&c.Input, served, caps)
			ok, err := apply(ctx, tx, q.Self, c, Decide(c.Input))
			if err != nil {
				return err
			}
			if ok {
				n++
			}
		}
		return nil
	})
	return n, last, full, err
}
