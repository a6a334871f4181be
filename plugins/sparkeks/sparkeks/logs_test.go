package sparkeks

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

const logA = "2026-01-02T03:04:05.100000000Z first\n" +
	"2026-01-02T03:04:05.100000000Z second, same stamp\n" +
	"2026-01-02T03:04:06.000000000Z third\n"

func TestCopyLogStripsTimestampsAndTracksPosition(t *testing.T) {
	var out strings.Builder
	var c logCursor
	var seen []LogPosition
	require.NoError(t, copyLog(strings.NewReader(logA+"no stamp here\n2026-01-02T03:04:06Z fourth"), &out, &c, func(p LogPosition) { seen = append(seen, p) }))
	assert.Equal(t, "first\nsecond, same stamp\nthird\nno stamp here\nfourth\n", out.String())
	assert.Equal(t, LogPosition{Time: ts("2026-01-02T03:04:06Z"), Lines: 2}, c.pos)
	require.NotEmpty(t, seen)
	assert.Equal(t, c.pos, seen[len(seen)-1])
}

func TestCopyLogSkipsWhatWasWritten(t *testing.T) {
	// Written so far: up to the first of the two lines stamped 05.1.
	c := logCursor{pos: LogPosition{Time: ts("2026-01-02T03:04:05.1Z"), Lines: 1}}
	// A resumed stream since 03:04:05 repeats an earlier line and both 05.1 ones.
	stream := "2026-01-02T03:04:05.000000000Z before\n" + logA
	var out strings.Builder
	require.NoError(t, copyLog(strings.NewReader(stream), &out, &c, func(LogPosition) {}))
	assert.Equal(t, "second, same stamp\nthird\n", out.String())

	// The same stream again (a reconnect) writes nothing new.
	out.Reset()
	require.NoError(t, copyLog(strings.NewReader(stream), &out, &c, func(LogPosition) {}))
	assert.Empty(t, out.String())
	assert.Equal(t, LogPosition{Time: ts("2026-01-02T03:04:06Z"), Lines: 1}, c.pos)
}

func TestCopyLogManyLinesOneStamp(t *testing.T) {
	line := "2026-01-02T03:04:05Z x\n"
	c := logCursor{pos: LogPosition{Time: ts("2026-01-02T03:04:05Z"), Lines: 2}}
	var out strings.Builder
	require.NoError(t, copyLog(strings.NewReader(strings.Repeat(line, 5)), &out, &c, func(LogPosition) {}))
	assert.Equal(t, "x\nx\nx\n", out.String())
	assert.Equal(t, 5, c.pos.Lines)
}

type failingReader struct{ data string }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.data == "" {
		return 0, errors.New("stream reset")
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func TestCopyLogReaderError(t *testing.T) {
	var out strings.Builder
	var c logCursor
	err := copyLog(&failingReader{data: "2026-01-02T03:04:05Z a\n"}, &out, &c, func(LogPosition) {})
	assert.ErrorContains(t, err, "stream reset")
	assert.Equal(t, "a\n", out.String(), "what was read is written before the error")
	assert.Equal(t, 1, c.pos.Lines)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("lease lost") }

func TestCopyLogWriterError(t *testing.T) {
	var c logCursor
	moved := false
	err := copyLog(strings.NewReader(logA), failingWriter{}, &c, func(LogPosition) { moved = true })
	assert.ErrorContains(t, err, "lease lost")
	assert.False(t, moved, "the position does not advance past output that was not written")
}

func TestLogsUnavailableSaidOnce(t *testing.T) {
	e := newEnv(t)
	var stderr, stdout lockedBuffer
	notef := func(format string, args ...any) {
		stderr.Write([]byte(strings.TrimSpace(sprintf(format, args...)) + "\n"))
	}
	// No such pod. The log cannot be read.
	f := startLogFollower(t.Context(), e.kube, "spark", "missing-driver", 5*time.Millisecond, &stdout, notef, nil, nil)
	time.Sleep(50 * time.Millisecond)
	f.finish(time.Second)
	assert.Equal(t, 1, strings.Count(stderr.String(), "driver logs unavailable"), stderr.String())
	assert.Contains(t, stderr.String(), "following the application status only")
	assert.Empty(t, stdout.String())

	// A pod without a node (not scheduled yet). Every job starts so. No
	// warning (startup_timeout speaks for a pod that never gets one).
	stderr = lockedBuffer{}
	_, err := e.kube.CoreV1().Pods("spark").Create(t.Context(), podWithoutNode("pending-driver"), metav1CreateOptions)
	require.NoError(t, err)
	f = startLogFollower(t.Context(), e.kube, "spark", "pending-driver", 5*time.Millisecond, &stdout, notef, nil, nil)
	time.Sleep(30 * time.Millisecond)
	f.finish(time.Second)
	assert.NotContains(t, stderr.String(), "driver logs unavailable")
}
