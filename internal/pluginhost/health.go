package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// Health check defaults. A check that takes longer than HealthTimeout
// fails: a plugin whose backend hangs is not healthy.
const (
	DefaultHealthInterval = 30 * time.Second
	HealthTimeout         = 10 * time.Second
)

// Health is the outcome of one plugin's latest health check.
type Health struct {
	Plugin string
	Err    error     // nil: healthy
	At     time.Time // when the check ended (local clock)
}

// CheckHealth runs the HealthCheck of every started plugin that declares
// it (the health capability), concurrently, each bounded by timeout, with
// the plugin's config. It records each outcome for Unhealthy and returns
// them, sorted by plugin. A plugin without the capability is not checked.
func (m *Manager) CheckHealth(ctx context.Context, timeout time.Duration) []Health {
	m.mu.Lock()
	procs := slices.Collect(maps.Values(m.procs))
	m.mu.Unlock()
	var (
		mu  sync.Mutex
		out []Health
		wg  sync.WaitGroup
	)
	for _, p := range procs {
		if !p.getInfo().Has(plugin.CapHealth) {
			continue
		}
		wg.Go(func() {
			h := Health{Plugin: p.name, Err: p.checkHealth(ctx, timeout), At: time.Now()}
			p.setHealth(h.Err)
			mu.Lock()
			out = append(out, h)
			mu.Unlock()
		})
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].Plugin < out[j].Plugin })
	return out
}

// checkHealth calls the plugin's HealthCheck once.
func (p *proc) checkHealth(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	inst, err := p.acquire(ctx)
	if err != nil {
		return fmt.Errorf("starting it: %w", err)
	}
	err = inst.rpc.HealthCheck(ctx, p.cfg.Config)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s", timeout)
	}
	return err
}

func (p *proc) setHealth(err error) {
	p.mu.Lock()
	was := p.unhealthy
	p.unhealthy = err
	p.mu.Unlock()
	switch {
	case err != nil:
		p.log.Warn("plugin health check failed", "err", err)
	case was != nil:
		p.log.Info("plugin healthy again", "was", was.Error())
	}
}

// Unhealthy returns, by plugin, the error of each plugin whose latest
// health check failed.
func (m *Manager) Unhealthy() map[string]error {
	m.mu.Lock()
	procs := slices.Collect(maps.Values(m.procs))
	m.mu.Unlock()
	out := map[string]error{}
	for _, p := range procs {
		p.mu.Lock()
		if p.unhealthy != nil {
			out[p.name] = p.unhealthy
		}
		p.mu.Unlock()
	}
	return out
}
