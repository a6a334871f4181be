package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type sink struct {
	mu     sync.Mutex
	chunks [][]byte
	err    error
}

func (s *sink) send(p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.chunks = append(s.chunks, append([]byte(nil), p...))
	return nil
}

func (s *sink) all() ([]byte, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Join(s.chunks, nil), len(s.chunks)
}

func TestChunkWriterBatchesAndKeepsOrder(t *testing.T) {
	s := &sink{}
	w := &chunkWriter{send: s.send}
	var want bytes.Buffer
	for i := range 20000 {
		line := fmt.Sprintf("line %d\n", i)
		want.WriteString(line)
		_, err := w.Write([]byte(line))
		require.NoError(t, err)
	}
	require.NoError(t, w.close())
	got, n := s.all()
	assert.True(t, bytes.Equal(want.Bytes(), got), "output reordered or lost")
	assert.Less(t, n, 20, "writes are batched into chunks, not one send per write")
	for _, c := range s.chunks {
		assert.LessOrEqual(t, len(c), maxChunk)
	}
}

func TestChunkWriterFlushesWhileRunning(t *testing.T) {
	s := &sink{}
	w := &chunkWriter{send: s.send}
	_, err := w.Write([]byte("early\n"))
	require.NoError(t, err)
	// Without close: the delay timer delivers it.
	require.Eventually(t, func() bool { got, _ := s.all(); return string(got) == "early\n" }, 2*time.Second, 10*time.Millisecond)
	require.NoError(t, w.close())
}

func TestChunkWriterSplitsLargeWrites(t *testing.T) {
	s := &sink{}
	w := &chunkWriter{send: s.send}
	big := bytes.Repeat([]byte("x"), 3*maxChunk+5)
	n, err := w.Write(big)
	require.NoError(t, err)
	assert.Equal(t, len(big), n)
	require.NoError(t, w.close())
	got, chunks := s.all()
	assert.Equal(t, big, got)
	assert.Equal(t, 4, chunks)
}

func TestChunkWriterErrors(t *testing.T) {
	refused := errors.New("lease lost")
	s := &sink{err: refused}
	w := &chunkWriter{send: s.send}
	_, err := w.Write(bytes.Repeat([]byte("x"), maxChunk))
	require.ErrorIs(t, err, refused)
	_, err = w.Write([]byte("more"))
	assert.ErrorIs(t, err, refused, "a send error sticks")

	w = &chunkWriter{send: (&sink{}).send}
	require.NoError(t, w.close())
	_, err = w.Write([]byte("late"))
	assert.ErrorIs(t, err, errRuntimeClosed)
}

func TestLifecycleShutdownCancelsCalls(t *testing.T) {
	l := newLifecycle()
	ctx, done := l.begin(context.Background())
	returned := make(chan struct{})
	go func() {
		<-ctx.Done()
		done()
		close(returned)
	}()
	assert.True(t, l.shutdown(time.Second), "the call returned within the grace")
	<-returned

	l = newLifecycle()
	_, done = l.begin(context.Background())
	defer done()
	assert.False(t, l.shutdown(50*time.Millisecond), "a call ignoring cancellation outlives the grace")
}
