package claim

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/metrics"
	"github.com/tetherjobs/tether/internal/store"
)

// TestLogRecordsKeepTheirNumbersAcrossAFailedSend checks that records are
// numbered in write order. A send that failed puts them back with the same
// numbers. A write arriving within the coalesce window is never joined to a
// record that was sent, because that record may be stored already, its answer
// lost. The write becomes a record of its own, with the next number.
func TestLogRecordsKeepTheirNumbersAcrossAFailedSend(t *testing.T) {
	f := newLogFlusher(nil, 1<<20, time.Hour, slog.New(slog.DiscardHandler), func(jobKey) {}, metrics.New())
	k := jobKey{"j", 1}
	f.track(k, false)
	out, errw := f.writer(context.Background(), k, stdoutStream), f.writer(context.Background(), k, stderrStream)

	write := func(w *jobWriter, s string) {
		_, err := w.Write([]byte(s))
		require.NoError(t, err)
	}
	write(out, "a")
	write(out, "b") // coalesced: same stream, within the window
	write(errw, "c")

	b := f.bufs[k]
	sent, _ := b.take()
	require.Len(t, sent, 2)
	assert.Equal(t, []int64{1, 2}, []int64{sent[0].Seq, sent[1].Seq})
	assert.Equal(t, "ab", string(sent[0].Data))

	f.putBack([]store.LogBatch{{JobID: k.ID, Lease: k.Lease, Records: sent}}) // the send failed
	write(errw, "d")                                                          // same stream as the last record, within the window
	recs := f.bufs[k].recs
	require.Len(t, recs, 3, "the write after a failed send is a record of its own")
	assert.Equal(t, []int64{1, 2, 3}, []int64{recs[0].Seq, recs[1].Seq, recs[2].Seq})
	assert.Equal(t, "c", string(recs[1].Data), "a sent record is never grown")
	assert.Equal(t, "d", string(recs[2].Data))

	write(errw, "e") // joins the unsent record 3
	assert.Len(t, f.bufs[k].recs, 3)
	assert.Equal(t, "de", string(f.bufs[k].recs[2].Data))
}
