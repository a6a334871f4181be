package emulator

import (
	"fmt"
	"strconv"
	"time"
)

// SyntheticImage is the container image the emulator simulates instead of
// running a process, so a benchmark can run many tasks cheaply. Its
// environment says what it does: SYNTH_LINES lines (default 10), one every
// SYNTH_INTERVAL (default 1s), "line <n> of <N> task <task-id>", then exit
// with SYNTH_EXIT (default 0).
const SyntheticImage = "tether.local/synthetic"

type synthSpec struct {
	lines    int
	interval time.Duration
	exit     int
}

func parseSynth(vars map[string]string) (synthSpec, error) {
	s := synthSpec{lines: 10, interval: time.Second}
	if v, ok := vars["SYNTH_LINES"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return s, fmt.Errorf("SYNTH_LINES=%q: want a whole number of lines", v)
		}
		s.lines = n
	}
	if v, ok := vars["SYNTH_INTERVAL"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return s, fmt.Errorf("SYNTH_INTERVAL=%q: want a Go duration such as 1s", v)
		}
		s.interval = d
	}
	if v, ok := vars["SYNTH_EXIT"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || !inRange(n, 0, 255) {
			return s, fmt.Errorf("SYNTH_EXIT=%q: want an exit code 0-255", v)
		}
		s.exit = n
	}
	return s, nil
}

// startSynthetic simulates a container. It uses one goroutine and one timer,
// with output going where awslogs would send it. Signals end it at once,
// with 128+signal, like a process that does not trap them.
func (e *Emulator) startSynthetic(t *task, idx int, c *container, exits chan<- exitEvent) error {
	spec, err := parseSynth(c.vars)
	if err != nil {
		return err
	}
	e.ensureStream(c.logGroup, c.logStream)
	go func() {
		exits <- exitEvent{idx: idx, code: e.synthesize(t.id, c, spec)}
	}()
	return nil
}

// synthesize prints line n at (n-1)*interval and exits at lines*interval.
func (e *Emulator) synthesize(taskID string, c *container, spec synthSpec) int {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for n := 0; ; {
		select {
		case sig := <-c.sig:
			return 128 + int(sig)
		case <-timer.C:
			if n == spec.lines {
				return spec.exit
			}
			n++
			if c.logGroup != "" {
				e.appendEvent(c.logGroup, c.logStream, fmt.Sprintf("line %d of %d task %s", n, spec.lines, taskID), time.Now())
			}
			timer.Reset(spec.interval)
		}
	}
}
