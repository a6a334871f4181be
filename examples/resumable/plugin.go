// Command resumable is a complete resumable tether plugin against a pretend
// backend (backend.go), the one docs/plugins.md walks through. A job's run
// is started under a name derived from the job, its name and read position
// are checkpointed, and Resume finds the run from them, so a hand-off or a
// crash at any point writes each line once and never starts a second run.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// Plugin runs jobs as runs of the backend. Its config is {"dir": "..."};
// a job's context is {"lines": 5, "step": "200ms"}.
type Plugin struct {
	now func() time.Time
}

// handleVersion is the version of handle this plugin writes and the newest
// it reads. A handle of version 0 (no envelope) has the same fields.
const handleVersion = 1

// handle is what the plugin checkpoints: the run and how many of its lines
// were written.
type handle struct {
	Run     string `json:"run"`
	Written int    `json:"written"`
}

// spec is a job's context.
type spec struct {
	Lines int    `json:"lines"`
	Step  string `json:"step"`
}

func (p *Plugin) Info(context.Context) (plugin.Info, error) {
	return plugin.Info{Name: "resumable", Version: "1.0.0"}, nil
}

func (p *Plugin) Execute(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	b, s, err := p.setup(job)
	if err != nil {
		return nil, err
	}
	r, err := b.Start(runName(job), s.Lines, s.step())
	if err != nil {
		return nil, plugin.WithClass(plugin.Retriable, err)
	}
	h := handle{Run: r.Name}
	if err := checkpoint(ctx, rt, h); err != nil { // as soon as the run exists
		return nil, err
	}
	return p.follow(ctx, b, h, rt)
}

func (p *Plugin) Resume(ctx context.Context, job *plugin.Job, rt plugin.Runtime) (*plugin.Result, error) {
	b, _, err := p.setup(job)
	if err != nil {
		return nil, err
	}
	var h handle
	if len(rt.Handle()) == 0 {
		// Execute may have started the run before its first checkpoint.
		if _, found, err := b.Find(runName(job)); err != nil {
			return nil, plugin.WithClass(plugin.Retriable, err)
		} else if !found {
			return p.Execute(ctx, job, rt) // it never started
		}
		h.Run = runName(job)
	} else if h, err = readHandle(rt.Handle()); err != nil {
		return nil, err
	}
	return p.follow(ctx, b, h, rt)
}

// follow writes the run's lines after h.Written as they are produced,
// checkpointing after each batch, until the run has produced them all.
func (p *Plugin) follow(ctx context.Context, b backend, h handle, rt plugin.Runtime) (*plugin.Result, error) {
	for {
		r, found, err := b.Find(h.Run)
		if err != nil {
			return nil, plugin.WithClass(plugin.Retriable, err)
		}
		if !found {
			return nil, plugin.Errorf(plugin.OutcomeUnknown, "resumable: run %s is gone", h.Run)
		}
		produced := b.Produced(r)
		for ; h.Written < produced; h.Written++ {
			fmt.Fprintf(rt.Stdout(), "%s line %d\n", r.Name, h.Written+1)
		}
		if err := checkpoint(ctx, rt, h); err != nil { // after writing what was read
			return nil, err
		}
		if h.Written == r.Lines {
			return &plugin.Result{Output: json.RawMessage(`{"lines":` + strconv.Itoa(r.Lines) + `}`), Message: "run finished"}, nil
		}
		select {
		case <-ctx.Done():
			return nil, plugin.WithClass(plugin.Retriable, context.Cause(ctx))
		case <-time.After(r.Step):
		}
	}
}

// Cleanup stops the job's run. It is safe for a run that never started.
func (p *Plugin) Cleanup(_ context.Context, job *plugin.Job) error {
	b, _, err := p.setup(job)
	if err != nil {
		return err
	}
	return b.Stop(runName(job))
}

// setup reads the plugin's config and the job's context.
func (p *Plugin) setup(job *plugin.Job) (backend, spec, error) {
	var c struct {
		Dir string `json:"dir"`
	}
	if err := json.Unmarshal(orEmpty(job.Config), &c); err != nil || c.Dir == "" {
		return backend{}, spec{}, plugin.Errorf(plugin.Permanent, "resumable: config.dir is required (a directory the backend keeps its runs in)")
	}
	s := spec{Lines: 5, Step: "200ms"}
	if err := json.Unmarshal(orEmpty(job.Context), &s); err != nil {
		return backend{}, spec{}, plugin.Errorf(plugin.Permanent, "resumable: bad context: %v", err)
	}
	if _, err := time.ParseDuration(s.Step); err != nil || s.Lines < 1 {
		return backend{}, spec{}, plugin.Errorf(plugin.Permanent, "resumable: context: lines must be ≥ 1 and step a duration like \"200ms\"")
	}
	now := p.now
	if now == nil {
		now = time.Now
	}
	return backend{dir: c.Dir, now: now}, s, nil
}

func (s spec) step() time.Duration { d, _ := time.ParseDuration(s.Step); return d }

// runName derives the run's name from the job: the same for every call of
// one attempt, whichever process makes it.
func runName(job *plugin.Job) string { return "job-" + job.ID + "-" + strconv.Itoa(job.Attempt) }

// readHandle reads every version of handle this plugin ever wrote. A newer
// plugin's handle is refused by DecodeHandle as outcome_unknown.
func readHandle(b []byte) (handle, error) {
	var h handle
	_, state, err := plugin.DecodeHandle(b, handleVersion)
	if err != nil {
		return h, err
	}
	if err := json.Unmarshal(state, &h); err != nil {
		return h, plugin.Errorf(plugin.Permanent, "resumable: bad handle: %v", err)
	}
	return h, nil
}

func checkpoint(ctx context.Context, rt plugin.Runtime, h handle) error {
	data, err := plugin.EncodeHandle(handleVersion, h)
	if err != nil {
		return plugin.WithClass(plugin.Permanent, err)
	}
	return rt.Checkpoint(ctx, data)
}

func orEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage(`{}`)
	}
	return raw
}

func main() { plugin.Serve(&Plugin{}) }
