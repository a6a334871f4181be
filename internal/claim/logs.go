package claim

import (
	"context"
	"errors"
	"log/slog"
	"math"
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

	// budget bounds the output held in memory, all runners together. A
	// resumable runner's held output past holdMax bytes is spilled to a file
	// (spill.go), so held output never fills the budget for the others.
	budget  *outputBudget
	holdMax int
	// kickAt is how much unsent output makes the flusher run before its
	// tick: kickBytes, or less under a small budget.
	kickAt int

	mu   sync.Mutex
	bufs map[jobKey]*jobBuf
	// pending is the bytes the ungated buffers hold (count keeps it).
	pending int
	kick    chan struct{}
	// spillDir is where held output is spilled ("": the system's temporary
	// directory, $TMPDIR).
	spillDir string

	flushMu sync.Mutex // one write at a time keeps chunks in order
}

type jobBuf struct {
	gated bool // resumable: held until a checkpoint
	// spill holds what a gated buffer spilled, before recs in write order.
	// taking is set while a checkpoint or end stores what was taken: the
	// file is empty then, and nothing is spilled until it settles.
	spill  *spillFile
	taking bool
	recs   []store.LogRecord // ready to store, in arrival order
	size   int               // bytes in recs
	seen   [2]int64          // bytes accepted so far, to stop buffering past the cap
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

// newLogFlusher returns a flusher with no output budget (bound sets one).
func newLogFlusher(st *store.Store, max int64, every time.Duration, log *slog.Logger, onLost func(jobKey), m *metrics.Metrics) *logFlusher {
	f := &logFlusher{store: st, max: max, every: every, log: log, onLost: onLost, paused: func() bool { return false },
		bytes: [2]prometheus.Counter{m.LogBytes.WithLabelValues("stdout"), m.LogBytes.WithLabelValues("stderr")},
		bufs:  map[jobKey]*jobBuf{}, kick: make(chan struct{}, 1)}
	f.bound(math.MaxInt64/2, 1)
	return f
}

// bound sets the output budget: budget bytes for capacity runners (see
// holdShare). It is called before any runner is tracked.
func (f *logFlusher) bound(budget int64, capacity int) {
	f.budget = newOutputBudget(budget, func() { kick(f.kick) })
	f.holdMax = holdShare(budget, capacity)
	f.kickAt = int(min(kickBytes, budget/4))
}

func (f *logFlusher) track(k jobKey, gated bool) {
	f.mu.Lock()
	f.bufs[k] = &jobBuf{gated: gated}
	f.mu.Unlock()
}

// untrack forgets a runner's buffer and whatever it still holds.
func (f *logFlusher) untrack(k jobKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bufs[k]
	if b == nil {
		return
	}
	f.count(b, -b.size)
	f.budget.release(int64(b.size))
	b.recs, b.size = nil, 0 // a take still settling must not count them again
	if b.spill != nil {
		if err := b.spill.remove(); err != nil {
			f.log.Warn("removing held job output", "job", k.ID, "err", err)
		}
	}
	delete(f.bufs, k)
}

// drop discards what a runner holds and has not stored. It is used for a
// resumable job detached from (its next holder produces it again), or a lease
// lost.
func (f *logFlusher) drop(k jobKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bufs[k]
	if b == nil {
		return
	}
	_, n := b.take()
	f.count(b, -n)
	f.budget.release(int64(n))
	if b.spill != nil {
		if err := b.spill.reset(); err != nil {
			f.log.Warn("emptying held job output", "job", k.ID, "err", err)
		}
	}
}

// writer is one stream of runner k. Its writes stop waiting for the
// budget once job ends.
func (f *logFlusher) writer(job context.Context, k jobKey, s stream) *jobWriter {
	return &jobWriter{f: f, job: job, key: k, stream: s}
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
	batch, n := f.takeReady()
	if len(batch) == 0 {
		return nil
	}
	held, err := f.store.AppendLogs(ctx, batch, f.max)
	if err != nil {
		f.log.Warn("writing job output; will retry", "jobs", len(batch), "err", err)
		f.putBack(batch)
		return err
	}
	f.budget.release(int64(n)) // stored, or dropped with a lease lost
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
// batch of them, and their bytes. Each has at least one record. The bytes
// stay counted in the budget until the batch is stored.
func (f *logFlusher) takeReady() ([]store.LogBatch, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var batch []store.LogBatch
	total := 0
	for k, b := range f.bufs {
		if b.gated || len(b.recs) == 0 {
			continue
		}
		recs, n := b.take()
		batch = append(batch, store.LogBatch{JobID: k.ID, Lease: k.Lease, Generation: f.generation, Records: recs})
		f.pending -= n
		total += n
	}
	return batch, total
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

// putBack returns batches that were not stored to their buffers, ahead of
// what arrived since, to be sent again. The bytes of a runner that has
// ended leave the budget.
func (f *logFlusher) putBack(batch []store.LogBatch) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, lb := range batch {
		n := recordBytes(lb.Records)
		b := f.bufs[jobKey{lb.JobID, lb.Lease}]
		if b == nil {
			f.budget.release(int64(n))
			continue
		}
		b.recs = append(lb.Records, b.recs...)
		b.size += n
		f.count(b, n)
	}
}

func recordBytes(recs []store.LogRecord) int {
	n := 0
	for _, r := range recs {
		n += len(r.Data)
	}
	return n
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
	lb, b, err := f.takeOne(k)
	if err != nil {
		return err
	}
	err = f.store.CheckpointDescribed(ctx, lb, f.max, handle, described)
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
func (f *logFlusher) takeForEnd(k jobKey) (lb store.LogBatch, settle func(error), err error) {
	f.flushMu.Lock()
	lb, b, err := f.takeOne(k)
	if err != nil {
		f.flushMu.Unlock()
		return lb, nil, err
	}
	if len(lb.Records) == 0 {
		f.settleOne(lb, b, nil)
		f.flushMu.Unlock()
		return lb, func(error) {}, nil
	}
	return lb, func(err error) {
		f.settleOne(lb, b, err)
		f.flushMu.Unlock()
	}, nil
}

// takeOne empties k's buffer, and its spill file before it, into a batch
// that carries, as After, the highest record number the database
// acknowledged before it. b is nil when the runner has ended. Until
// settleOne, b spills nothing more. The bytes read back from the file are
// counted in the budget (past its limit if need be: they are one runner's
// at a time, as flushMu is held), until they settle.
func (f *logFlusher) takeOne(k jobKey) (store.LogBatch, *jobBuf, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	lb := store.LogBatch{JobID: k.ID, Lease: k.Lease, Generation: f.generation}
	b := f.bufs[k]
	if b == nil {
		return lb, nil, nil
	}
	var spilled []store.LogRecord
	if b.spill != nil {
		var err error
		if spilled, err = b.spill.readAll(); err != nil {
			return lb, nil, err
		}
	}
	var n int
	lb.After = b.stored
	lb.Records, n = b.take()
	f.count(b, -n)
	f.budget.force(int64(recordBytes(spilled)))
	lb.Records = append(spilled, lb.Records...)
	if len(lb.Records) > 0 {
		// Sent now, so never grown by a later write (see jobBuf.seq).
		b.sent = max(b.sent, lb.Records[len(lb.Records)-1].Seq)
	}
	b.taking = true
	return lb, b, nil
}

// settleOne records what became of a batch takeOne made: stored, kept for
// the next try, or (a gap: the job is resumed, which writes it again)
// dropped. Its bytes leave the budget unless kept.
func (f *logFlusher) settleOne(lb store.LogBatch, b *jobBuf, err error) {
	if b == nil {
		return
	}
	if err != nil && !errors.Is(err, store.ErrOutputGap) {
		f.putBack([]store.LogBatch{lb})
		f.mu.Lock()
		b.taking = false
		if f.bufs[jobKey{lb.JobID, lb.Lease}] == b { // not ended meanwhile
			f.spillHeld(b)
		}
		f.mu.Unlock()
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b.taking = false
	f.budget.release(int64(recordBytes(lb.Records)))
	if err == nil && len(lb.Records) > 0 {
		b.stored = max(b.stored, lb.Records[len(lb.Records)-1].Seq)
	}
}

// spillHeld moves a gated buffer's records to its spill file once they
// reach holdMax, under mu. On a disk error they stay in memory.
func (f *logFlusher) spillHeld(b *jobBuf) {
	if !b.gated || b.taking || b.size < f.holdMax {
		return
	}
	f.spillNow(b)
}

// spillNow moves a gated buffer's records to its spill file, under mu, and
// gives their bytes back to the budget. On a disk error they stay in
// memory.
func (f *logFlusher) spillNow(b *jobBuf) {
	if len(b.recs) == 0 {
		return
	}
	if b.spill == nil {
		sf, err := createSpill(f.spillDir)
		if err != nil {
			f.log.Warn("keeping held job output in memory", "err", err)
			return
		}
		b.spill = sf
	}
	if err := b.spill.write(b.recs); err != nil {
		f.log.Warn("keeping held job output in memory", "err", err)
		return
	}
	// Never sent, so no later write may join them: b.sent stays.
	f.budget.release(int64(b.size))
	b.recs, b.size = nil, 0
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
	job    context.Context // the runner's: once it ends, writes wait no more
	key    jobKey
	stream stream
}

// writeMargin is how long before its caller's deadline a write waiting for
// the budget gives up waiting and is let in: the plugin's Write call must be
// answered before it times out.
const writeMargin = 2 * time.Second

// Write buffers p for the next flush, waiting for room in the budget while
// the runner lives. Output past the cap is counted but not kept. The
// database already holds the truncation marker.
func (w *jobWriter) Write(p []byte) (int, error) {
	return w.WriteContext(context.Background(), p)
}

// WriteContext is Write for a caller that can wait only until call's
// deadline (the plugin's Write call): the wait ends writeMargin before it.
func (w *jobWriter) WriteContext(call context.Context, p []byte) (int, error) {
	f := w.f
	f.bytes[w.stream].Add(float64(len(p)))
	want, ok := f.admit(w.key, w.stream, len(p))
	if !ok {
		return len(p), nil // the runner has ended; late output has nowhere to go
	}
	var giveUp time.Time
	if d, ok := call.Deadline(); ok {
		giveUp = d.Add(-writeMargin)
	}
	if f.budget.acquire(w.job, call, int64(want), giveUp) {
		f.log.Debug("job output let in past the output budget", "job", w.key.ID, "bytes", want)
	}
	now := time.Now() // the receive time each line is stamped with
	f.mu.Lock()
	b := f.bufs[w.key]
	if b == nil {
		f.budget.release(int64(want))
		f.mu.Unlock()
		return len(p), nil
	}
	keep := b.add(w.stream, p, now, f.max)
	b.size += len(keep)
	b.seen[w.stream] += int64(len(keep))
	f.count(b, len(keep))
	f.budget.release(int64(want - len(keep))) // another write took the cap's room meanwhile
	f.spillHeld(b)
	full := !b.gated && f.pending >= f.kickAt
	f.mu.Unlock()
	if full {
		kick(f.kick)
	}
	return len(p), nil
}

// admit returns how many of n bytes written to runner k's stream s are
// kept under its cap (ok false: the runner has ended). A gated runner
// whose write would wait spills what it holds first: its held output must
// not make it, or others, wait for a checkpoint.
func (f *logFlusher) admit(k jobKey, s stream, n int) (want int, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bufs[k]
	if b == nil {
		return 0, false
	}
	want = int(max(0, min(int64(n), f.max+1-b.seen[s])))
	if b.gated && !b.taking && want > 0 && !f.budget.fits(int64(want)) {
		f.spillNow(b)
	}
	return want, true
}
