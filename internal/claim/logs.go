package claim

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
)

type stream int

const (
	stdoutStream stream = iota
	stderrStream
)

// kickBytes is how much unsent output makes the flusher run before its tick.
const kickBytes = 256 << 10

// logFlusher gathers every running job's output and writes it in one fenced
// statement per tick, instead of one INSERT per line.
type logFlusher struct {
	store  *store.Store
	max    int64
	every  time.Duration
	log    *slog.Logger
	onLost func(jobID string)
	bytes  [2]prometheus.Counter

	mu      sync.Mutex
	bufs    map[string]*jobBuf
	pending int
	kick    chan struct{}

	flushMu sync.Mutex // one flush at a time keeps chunks in order
}

type jobBuf struct {
	lease int64
	data  [2][]byte
	seen  [2]int64 // bytes accepted so far, to stop buffering past the cap
}

func newLogFlusher(st *store.Store, max int64, every time.Duration, log *slog.Logger, onLost func(string), m *metrics.Metrics) *logFlusher {
	return &logFlusher{store: st, max: max, every: every, log: log, onLost: onLost,
		bytes: [2]prometheus.Counter{m.LogBytes.WithLabelValues("stdout"), m.LogBytes.WithLabelValues("stderr")},
		bufs:  map[string]*jobBuf{}, kick: make(chan struct{}, 1)}
}

func (f *logFlusher) track(jobID string, lease int64) {
	f.mu.Lock()
	f.bufs[jobID] = &jobBuf{lease: lease}
	f.mu.Unlock()
}

func (f *logFlusher) untrack(jobID string) {
	f.mu.Lock()
	if b := f.bufs[jobID]; b != nil {
		f.pending -= len(b.data[0]) + len(b.data[1])
	}
	delete(f.bufs, jobID)
	f.mu.Unlock()
}

func (f *logFlusher) writer(jobID string, s stream) *jobWriter {
	return &jobWriter{f: f, jobID: jobID, stream: s}
}

func (f *logFlusher) run(ctx context.Context) {
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = f.flushNow(fctx) // logged inside; nothing more to do at exit
			cancel()
			return
		case <-t.C:
		case <-f.kick:
		}
		_ = f.flushNow(ctx) // kept for the next tick on error
	}
}

// flushNow writes everything buffered so far. Output of jobs whose lease is
// gone is dropped and the job stopped; on a database error the output is kept
// for the next flush and the error returned.
func (f *logFlusher) flushNow(ctx context.Context) error {
	f.flushMu.Lock()
	defer f.flushMu.Unlock()

	f.mu.Lock()
	var batch []store.LogBatch
	for id, b := range f.bufs {
		if len(b.data[0]) == 0 && len(b.data[1]) == 0 {
			continue
		}
		batch = append(batch, store.LogBatch{JobID: id, Lease: b.lease, Stdout: b.data[0], Stderr: b.data[1]})
		f.pending -= len(b.data[0]) + len(b.data[1])
		b.data = [2][]byte{}
	}
	f.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	held, err := f.store.AppendLogs(ctx, batch, f.max)
	if err != nil {
		f.log.Warn("writing job output; will retry", "jobs", len(batch), "err", err)
		f.mu.Lock()
		for _, lb := range batch {
			if b := f.bufs[lb.JobID]; b != nil {
				b.data[0] = append(lb.Stdout, b.data[0]...)
				b.data[1] = append(lb.Stderr, b.data[1]...)
				f.pending += len(lb.Stdout) + len(lb.Stderr)
			}
		}
		f.mu.Unlock()
		return err
	}
	for _, lb := range batch {
		if !held[lb.JobID] {
			f.onLost(lb.JobID)
		}
	}
	return nil
}

// jobWriter is one stream of one job.
type jobWriter struct {
	f      *logFlusher
	jobID  string
	stream stream
}

// Write buffers p for the next flush. Output past the cap is counted but not
// kept: the database already holds the truncation marker.
func (w *jobWriter) Write(p []byte) (int, error) {
	f := w.f
	f.bytes[w.stream].Add(float64(len(p)))
	f.mu.Lock()
	b := f.bufs[w.jobID]
	if b == nil {
		f.mu.Unlock()
		return len(p), nil // the job has ended; late output has nowhere to go
	}
	room := f.max + 1 - b.seen[w.stream] // one byte past the cap makes the marker
	keep := p
	if int64(len(keep)) > room {
		keep = keep[:max(room, 0)]
	}
	b.data[w.stream] = append(b.data[w.stream], keep...)
	b.seen[w.stream] += int64(len(keep))
	f.pending += len(keep)
	kick := f.pending >= kickBytes
	f.mu.Unlock()
	if kick {
		select {
		case f.kick <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}
