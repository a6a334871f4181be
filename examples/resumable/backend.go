package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// backend is a pretend remote service, standing for ECS or a cluster: a run
// started under a name produces one line every step until it has produced
// its lines. A run is a file in dir holding when it started, so it outlives
// the plugin process that started it, as remote work does.
type backend struct {
	dir string
	now func() time.Time
}

// run is one run as the backend stores it.
type run struct {
	Name    string        `json:"name"`
	Started time.Time     `json:"started"`
	Lines   int           `json:"lines"`
	Step    time.Duration `json:"step"`
}

// Start starts a run under name unless one exists; either way it returns
// the run under that name. Starting twice never starts a second run.
func (b backend) Start(name string, lines int, step time.Duration) (run, error) {
	r := run{Name: name, Started: b.now(), Lines: lines, Step: step}
	data, err := json.Marshal(r)
	if err != nil {
		return run{}, err
	}
	f, err := os.OpenFile(b.path(name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		got, _, err := b.Find(name)
		return got, err
	}
	if err != nil {
		return run{}, fmt.Errorf("starting run %s: %w", name, err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return run{}, fmt.Errorf("starting run %s: %w", name, err)
	}
	return r, nil
}

// Find returns the run under name. found is false when there is none.
func (b backend) Find(name string) (r run, found bool, err error) {
	data, err := os.ReadFile(b.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return run{}, false, nil
	}
	if err != nil {
		return run{}, false, fmt.Errorf("finding run %s: %w", name, err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return run{}, false, fmt.Errorf("reading run %s: %w", name, err)
	}
	return r, true, nil
}

// Produced is how many lines r has produced by now.
func (b backend) Produced(r run) int {
	n := int(b.now().Sub(r.Started) / r.Step)
	return min(max(n, 0), r.Lines)
}

// Stop deletes the run under name. Stopping a run that is gone is no error.
func (b backend) Stop(name string) error {
	if err := os.Remove(b.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("stopping run %s: %w", name, err)
	}
	return nil
}

func (b backend) path(name string) string { return filepath.Join(b.dir, name+".json") }
