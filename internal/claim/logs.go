package claim

import (
	"context"
	"errors"
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

// streamNames are the streams' names as job_logs stores them.
var streamNames = [...]string{stdoutStream: "stdout", stderrStream: "stderr"}

func (s stream) String() string { return streamNames[s] }

// kickBytes is how much unsent output makes the flusher run before its tick.
const kickBytes = 256 << 10

// flushTimeout bounds one periodic flush.
const flushTimeout = 5 * time.Second

// coalesceWindow joins a stream's back-to-back writes into one stored chunk
// while they arrive this close to the chunk's first. A chatty plugin then
// costs a few rows per tick, not one per write. A chunk's time is off by at
// most this much for its later lines.
const coalesceWindow = 50 * time.Millisecond

// logFlusher gathers every running job's output and writes it in one fenced
// statement per tick, instead of one INSERT per line, in the order it was
// written across both streams. It keeps one sequence per runner, not one
// buffer per stream, so a reader of the combined log sees lines as the plugin
// wrote them. Buffers are per runner (job, lease). A runner that lost its
// lease can neither flush into nor delete the buffer of the runner that holds
// the job now.
//
// A resumable job's output is held until its plugin's next Checkpoint and
// stored in the same transaction as the handle (or at the attempt's end).
// Output written after the last checkpoint belongs to whoever resumes the
// job, who reads it again from the remote side. Stored at once instead, a
// line would be copied twice whenever a handle failed to land.
type logFlusher struct {
	store *store.Store
	// generation is this process's. Every write is fenced by it too.
	generation string
	// paused holds the periodic flush back (a reconcile pending). It is
	// never true unless the service sets it.
	paused func() bool
	// flushed is the Flushed test signal.
	flushed chan<- Flushed
	max     int64
	every   time.Duration
	log     *slog.Logger
	onLost  func(jobKey)
	bytes   [2]prometheus.Counter

	mu   sync.Mutex
	bufs map[jobKey]*jobBuf
	// pending is the bytes the ungated buffers hold (count keeps it).
	pending int
	kick    chan struct{}

	flushMu sync.Mutex // one write at a time keeps chunks in order
}

type jobBuf struct {
	gated bool              // resumable: held until a checkpoint
	recs  []store.LogRecord // ready to store, in arrival order
	size  int               // bytes in recs
	seen  [2]int64          // bytes accepted so far, to stop buffering past the cap
	// seq is the last record number given out. Records are numbered 1, 2, …
	// per runner, so a resend is stored once. sent is the highest one handed
	// to a statement. A record that was sent may be stored already (its
	// answer lost), so no write is ever joined to it. stored is the highest
	// one the database acknowledged (for the reconcile).
	seq, sent, stored int64
}

// take empties b and returns what it held.
func (b *jobBuf) take() ([]store.LogRecord, int) {
	recs, n := b.recs, b.size
	b.recs, b.size = nil, 0
	if len(recs) > 0 {
		b.sent = max(b.sent, recs[len(recs)-1].Seq)
	}
	return recs, n
}

// count adds n bytes of b's to pending, under mu. A gated buffer's bytes
// wait for a checkpoint, not for the periodic flush, so they do not count.
func (f *logFlusher) count(b *jobBuf, n int) {
	if !b.gated {
		f.pending += n
	}
}

func newLogFlusher(st *store.Store, max int64, every time.Duration, log *slog.Logger, onLost func(jobKey), m *metrics.Metrics) *logFlusher {
	return &logFlusher{store: st, max: max, every: every, log: log, onLost: onLost, paused: func() bool { return false },
		bytes: [2]prometheus.Counter{m.LogBytes.WithLabelValues("stdout"), m.LogBytes.WithLabelValues("stderr")},
		bufs:  map[jobKey]*jobBuf{}, kick: make(chan struct{}, 1)}
}

func (f *logFlusher) track(k jobKey, gated bool) {
	f.mu.Lock()
	f.bufs[k] = &jobBuf{gated: gated}
	f.mu.Unlock()
}

// untrack forgets a runner's buffer and whatever it still holds.
func (f *logFlusher) untrack(k jobKey) {
	f.mu.Lock()
	if b := f.bufs[k]; b != nil {
		f.count(b, -b.size)
	}
	delete(f.bufs, k)
	f.mu.Unlock()
}

// drop discards what a runner holds and has not stored. It is used for a
// resumable job detached from (its next holder produces it again), or a lease
// lost.
func (f *logFlusher) drop(k jobKey) {
	f.mu.Lock()
	if b := f.bufs[k]; b != nil {
		_, n := b.take()
		f.count(b, -n)
	}
	f.mu.Unlock()
}

func (f *logFlusher) writer(k jobKey, s stream) *jobWriter {
	return &jobWriter{f: f, key: k, stream: s}
}

func (f *logFlusher) run(ctx context.Context) {
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = f.flush(fctx) // logged inside; nothing more to do at exit
			cancel()
			return
		case <-t.C:
		case <-f.kick:
		}
		if f.paused() {
			continue // the database's history changed: nothing is written before the reconcile
		}
		// Bounded, because a hung connection must not hold flushMu, which
		// final writes and checkpoints wait for.
		fctx, cancel := context.WithTimeout(ctx, flushTimeout)
		_ = f.flush(fctx) // kept for the next tick on error
		cancel()
	}
}

// flush writes what is ready to store, every ungated buffer. Output of a
// runner whose lease is gone is dropped and the runner stopped. On a
// database error the output is kept for the next flush and the error
// returned. The statement may have committed all the same (a timeout on a
// hung server that wakes later). The records keep their numbers, so the next
// flush stores only what did not land.
func (f *logFlusher) flush(ctx context.Context) error {
	f.flushMu.Lock()
	defer f.flushMu.Unlock()
	batch := f.takeReady()
	if len(batch) == 0 {
		return nil
	}
	held, err := f.store.AppendLogs(ctx, batch, f.max)
	if err != nil {
		f.log.Warn("writing job output; will retry", "jobs", len(batch), "err", err)
		f.putBack(batch)
		return err
	}
	f.markStored(batch, held)
	for _, lb := range batch {
		if !held[lb.JobID] {
			f.onLost(jobKey{lb.JobID, lb.Lease})
			continue
		}
		signal(f.flushed, Flushed{JobID: lb.JobID, Lease: lb.Lease, Seq: lb.Records[len(lb.Records)-1].Seq})
	}
	return nil
}

// takeReady empties the ungated buffers that hold records and returns a
// batch of them. Each has at least one record.
func (f *logFlusher) takeReady() []store.LogBatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	var batch []store.LogBatch
	for k, b := range f.bufs {
		if b.gated || len(b.recs) == 0 {
			continue
		}
		recs, n := b.take()
		batch = append(batch, store.LogBatch{JobID: k.ID, Lease: k.Lease, Generation: f.generation, Records: recs})
		f.pending -= n
	}
	return batch
}

// markStored records which of batch's records the database acknowledged:
// those of the jobs whose lease held. takeReady made batch.
func (f *logFlusher) markStored(batch []store.LogBatch, held map[string]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, lb := range batch {
		if b := f.bufs[jobKey{lb.JobID, lb.Lease}]; b != nil && held[lb.JobID] {
			b.stored = max(b.stored, lb.Records[len(lb.Records)-1].Seq)
		}
	}
}

// storedSeq is the highest record number of k's the database acknowledged.
func (f *logFlusher) storedSeq(k jobKey) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.bufs[k]; b != nil {
		return b.stored
	}
	return 0
}

func (f *logFlusher) putBack(batch []store.LogBatch) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, lb := range batch {
		if b := f.bufs[jobKey{lb.JobID, lb.Lease}]; b != nil {
			n := 0
			for _, r := range lb.Records {
				n += len(r.Data)
			}
			b.recs = append(lb.Records, b.recs...)
			b.size += n
			f.count(b, n)
		}
	}
}

// checkpoint stores the runner's output so far (other jobs' ready output
// first, to keep chunks in write order) and handle in one transaction, with
// what the plugin described the handle as, if it did. A nil description
// stores nothing.
func (f *logFlusher) checkpoint(ctx context.Context, k jobKey, handle []byte, described *store.Described) error {
	if err := f.flush(ctx); err != nil {
		return err
	}
	f.flushMu.Lock()
	defer f.flushMu.Unlock()
	lb, b := f.takeOne(k)
	err := f.store.CheckpointDescribed(ctx, lb, f.max, handle, described)
	f.settleOne(lb, b, err)
	return err
}

// takeForEnd takes what a resumable runner holds at its attempt's end, for
// the end's own transaction (store.End.Output). Output stored apart from
// the end would stay if the end were lost, and the resume would write it
// again. lb.After is the highest record the database acknowledged. settle
// must be called once with the end's result: the output is then marked
// stored, kept for the next try, or dropped (a gap: the resume writes it
// again). flushMu is held until then, as for a checkpoint, when there is
// output.
func (f *logFlusher) takeForEnd(k jobKey) (lb store.LogBatch, settle func(error)) {
	f.flushMu.Lock()
	lb, b := f.takeOne(k)
	if len(lb.Records) == 0 {
		f.flushMu.Unlock()
		return lb, func(error) {}
	}
	return lb, func(err error) {
		f.settleOne(lb, b, err)
		f.flushMu.Unlock()
	}
}

// takeOne empties k's buffer into a batch that carries, as After, the
// highest record number the database acknowledged before it. b is nil when
// the runner has ended.
func (f *logFlusher) takeOne(k jobKey) (store.LogBatch, *jobBuf) {
	f.mu.Lock()
	defer f.mu.Unlock()
	lb := store.LogBatch{JobID: k.ID, Lease: k.Lease, Generation: f.generation}
	b := f.bufs[k]
	if b != nil {
		var n int
		lb.After = b.stored
		lb.Records, n = b.take()
		f.count(b, -n)
	}
	return lb, b
}

// settleOne records what became of a batch takeOne made: stored, kept for
// the next try, or (a gap: the job is resumed, which writes it again)
// dropped.
func (f *logFlusher) settleOne(lb store.LogBatch, b *jobBuf, err error) {
	switch {
	case b == nil:
	case errors.Is(err, store.ErrOutputGap):
	case err != nil:
		f.putBack([]store.LogBatch{lb})
	case len(lb.Records) > 0:
		f.mu.Lock()
		b.stored = max(b.stored, lb.Records[len(lb.Records)-1].Seq)
		f.mu.Unlock()
	}
}

// add buffers p, cut at the stream's cap of limit bytes (one byte past it
// makes the database's truncation marker), and returns what it kept. A
// write close behind the stream's last unsent record joins it.
func (b *jobBuf) add(s stream, p []byte, now time.Time, limit int64) []byte {
	room := limit + 1 - b.seen[s]
	keep := p[:max(0, min(room, int64(len(p))))]
	if n := len(b.recs); n > 0 && b.recs[n-1].Seq > b.sent && b.recs[n-1].Stream == s.String() && now.Sub(b.recs[n-1].At) < coalesceWindow {
		b.recs[n-1].Data = append(b.recs[n-1].Data, keep...)
	} else if len(keep) > 0 {
		// Copied, because p is the caller's and may be reused once Write
		// returns.
		b.seq++
		b.recs = append(b.recs, store.LogRecord{Seq: b.seq, Stream: s.String(), At: now, Data: append([]byte(nil), keep...)})
	}
	return keep
}

// jobWriter is one stream of one runner.
type jobWriter struct {
	f      *logFlusher
	key    jobKey
	stream stream
}

// Write buffers p for the next flush. Output past the cap is counted but not
// kept. The database already holds the truncation marker.
func (w *jobWriter) Write(p []byte) (int, error) {
	f := w.f
	f.bytes[w.stream].Add(float64(len(p)))
	now := time.Now() // the receive time each line is stamped with
	f.mu.Lock()
	b := f.bufs[w.key]
	if b == nil {
		f.mu.Unlock()
		return len(p), nil // the runner has ended; late output has nowhere to go
	}
	keep := b.add(w.stream, p, now, f.max)
	b.size += len(keep)
	b.seen[w.stream] += int64(len(keep))
	f.count(b, len(keep))
	full := !b.gated && f.pending >= kickBytes
	f.mu.Unlock()
	if full {
		kick(f.kick)
	}
	return len(p), nil
}
