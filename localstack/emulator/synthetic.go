package emulator

import (
	"cmp"
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
	// cmp.Or keeps the first error.
	err := cmp.Or(
		synthVar(vars, "SYNTH_LINES", &s.lines, strconv.Atoi,
			func(n int) bool { return n >= 0 }, "want a whole number of lines"),
		synthVar(vars, "SYNTH_INTERVAL", &s.interval, time.ParseDuration,
			func(d time.Duration) bool { return d >= 0 }, "want a Go duration such as 1s"),
		synthVar(vars, "SYNTH_EXIT", &s.exit, strconv.Atoi,
			func(n int) bool { return inRange(n, 0, 255) }, "want an exit code 0-255"),
	)
	return s, err
}

// synthVar sets *dst from the variable name when it is set. A value that
// does not parse, or that valid refuses, is an error saying want.
func synthVar[T any](vars map[string]string, name string, dst *T, parse func(string) (T, error), valid func(T) bool, want string) error {
	v, ok := vars[name]
	if !ok {
		return nil
	}
	x, err := parse(v)
	if err != nil || !valid(x) {
		return fmt.Errorf("%s=%q: %s", name, v, want)
	}
	*dst = x
	return nil
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
			e.appendEvent(c.logGroup, c.logStream, fmt.Sprintf("line %d of %d task %s", n, spec.lines, taskID), time.Now())
			timer.Reset(spec.interval)
		}
	}
}
