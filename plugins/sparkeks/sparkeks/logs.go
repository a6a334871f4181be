package sparkeks

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// driverContainer is the container spark-submit gives the driver pod.
const driverContainer = "spark-kubernetes-driver"

// logFlushBytes bounds how much log output is held before it is written.
const logFlushBytes = 32 << 10

// logCursor decides which lines of a timestamped log stream are new. A
// stream asked for since a time (truncated to the second) repeats lines
// already copied. Lines before pos.Time are skipped, and so are the first
// pos.Lines lines stamped exactly pos.Time.
type logCursor struct {
	pos  LogPosition
	seen int // lines stamped pos.Time met in the current stream
}

// newStream resets the per-stream count. Call it before each stream.
func (c *logCursor) newStream() { c.seen = 0 }

// accept reports whether a line stamped ts is new, and advances the
// position if so.
func (c *logCursor) accept(ts time.Time) bool {
	switch {
	case ts.Before(c.pos.Time):
		return false
	case ts.Equal(c.pos.Time):
		c.seen++
		if c.seen <= c.pos.Lines {
			return false
		}
		c.pos.Lines = c.seen
		return true
	default:
		c.pos = LogPosition{Time: ts, Lines: 1}
		c.seen = 1
		return true
	}
}

// splitTimestamp splits a line of a Timestamps: true log into its
// RFC 3339 timestamp and the rest. ok is false when it has none.
func splitTimestamp(line string) (time.Time, string, bool) {
	stamp, rest, _ := strings.Cut(line, " ") // without a space: line, ""
	ts, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		return time.Time{}, line, false
	}
	return ts, rest, true
}

// copyLog copies the new lines of a timestamped log stream to w without
// their timestamps, and calls advanced with the position after each write.
// Lines without a timestamp are copied as they are and do not move the
// position. It returns the reader's error (nil at EOF) or the writer's.
func copyLog(r io.Reader, w io.Writer, c *logCursor, advanced func(LogPosition)) error {
	c.newStream()
	br := bufio.NewReaderSize(r, 64<<10)
	var buf bytes.Buffer
	pending := c.pos
	var err error
	for err == nil {
		var line string
		line, err = br.ReadString('\n')
		if line != "" {
			text := strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
			ts, rest, ok := splitTimestamp(text)
			if !ok || c.accept(ts) {
				buf.WriteString(rest)
				buf.WriteByte('\n')
				pending = c.pos
			}
		}
		// Write what was read whenever the stream has nothing more at hand,
		// so a following stream's lines appear as they come.
		if buf.Len() > 0 && (err != nil || br.Buffered() == 0 || buf.Len() >= logFlushBytes) {
			if _, werr := w.Write(buf.Bytes()); werr != nil {
				return fmt.Errorf("writing the driver log: %w", werr)
			}
			buf.Reset()
			advanced(pending)
		}
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// logFollower streams the driver pod's log into the job's stdout, from the
// position in the handle, until finish or ctx's end. When the log cannot be
// read it says why once and retries quietly every poll interval.
type logFollower struct {
	kube      kubernetes.Interface
	namespace string
	pod       string
	interval  time.Duration
	stdout    io.Writer
	notef     func(format string, args ...any)
	// cached, when set, is the driver pod as the plugin's shared informer
	// holds it (nil: not cached). It spares a GET of the pod per attempt
	// and, while the container waits to start, the log request.
	cached func() *corev1.Pod

	cursor logCursor // only the follower's goroutine uses it

	mu    sync.Mutex
	pos   LogPosition // what has been written
	moved bool        // pos advanced since the last position call

	stop   chan struct{} // closed by finish: the application ended
	done   chan struct{}
	cancel context.CancelFunc
	warned bool
	opened bool
}

func startLogFollower(ctx context.Context, kube kubernetes.Interface, namespace, pod string, interval time.Duration,
	stdout io.Writer, notef func(string, ...any), pos *LogPosition, cached func() *corev1.Pod) *logFollower {
	lctx, cancel := context.WithCancel(ctx)
	f := &logFollower{
		kube: kube, namespace: namespace, pod: pod, interval: interval, stdout: stdout, notef: notef, cached: cached,
		stop: make(chan struct{}), done: make(chan struct{}), cancel: cancel,
	}
	if pos != nil {
		f.cursor.pos, f.pos = *pos, *pos
	}
	go f.run(lctx)
	return f
}

// position returns the copied position and whether it moved since the last call.
func (f *logFollower) position() (LogPosition, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	moved := f.moved
	f.moved = false
	return f.pos, moved
}

// finish lets the follower read what is left of the log for at most drain,
// then stops it.
func (f *logFollower) finish(drain time.Duration) {
	close(f.stop)
	t := time.NewTimer(drain)
	defer t.Stop()
	select {
	case <-f.done:
	case <-t.C:
	}
	f.abort()
}

// abort stops the follower at once and waits for it.
func (f *logFollower) abort() {
	f.cancel()
	<-f.done
}

func (f *logFollower) run(ctx context.Context) {
	defer close(f.done)
	for {
		final := isClosed(f.stop)
		err := f.streamOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		var werr *writeError
		if errors.As(err, &werr) {
			return // the job's output is refused: the job is ending
		}
		wait := f.interval
		var ns *notStartedError
		switch {
		case errors.As(err, &ns):
			if ns.cached {
				// Asking the cache again costs no request. Start reading soon
				// after the container does.
				wait = min(wait, time.Second)
			}
		case err != nil && !f.warned:
			f.warned = true
			f.notef("driver logs unavailable: %v; following the application status only (retrying every %s)", err, f.interval)
		}
		if final {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-f.stop:
			t.Stop() // one last pass for the log's tail
		case <-t.C:
		}
	}
}

type writeError struct{ err error }

// notStartedError is a driver whose log cannot exist yet (not scheduled,
// or its container waiting to start): the normal start of every job, not
// worth a warning. cached: learnt from the informer's cache, without a
// request.
type notStartedError struct {
	msg    string
	cached bool
}

func (e *notStartedError) Error() string { return e.msg }

func (e *writeError) Error() string { return e.err.Error() }

// streamOnce opens the driver's log from the copied position and copies it
// until the stream ends.
func (f *logFollower) streamOnce(ctx context.Context) error {
	pod, fromCache, err := f.driverPod(ctx)
	if err != nil {
		return err
	}
	container := containerOf(pod)
	if err := f.notStarted(pod, container, fromCache); err != nil {
		return err
	}
	stream, err := f.openLog(ctx, container, fromCache)
	if err != nil {
		return err
	}
	defer stream.Close()
	if !f.opened {
		f.opened = true
		f.notef("streaming the log of driver pod %s/%s", f.namespace, f.pod)
	}
	return f.copy(stream)
}

// driverPod is the driver pod from the informer's cache when it has it
// (fromCache), else read with a GET.
func (f *logFollower) driverPod(ctx context.Context) (pod *corev1.Pod, fromCache bool, err error) {
	if f.cached != nil {
		if p := f.cached(); p != nil && p.Name == f.pod {
			return p, true, nil
		}
	}
	pod, err = f.kube.CoreV1().Pods(f.namespace).Get(ctx, f.pod, metav1.GetOptions{})
	if err != nil {
		return nil, false, fmt.Errorf("getting driver pod %s/%s: %w", f.namespace, f.pod, err)
	}
	return pod, false, nil
}

// notStarted returns a notStartedError when the pod is not on a node yet
// or, as the cache shows it, its container waits to start. That is what the
// kubelet would answer (400), without asking it.
func (f *logFollower) notStarted(pod *corev1.Pod, container string, fromCache bool) error {
	if pod.Spec.NodeName == "" {
		return &notStartedError{msg: fmt.Sprintf("driver pod %s/%s is not on a node (not scheduled yet, or no kubelet serves it)", f.namespace, f.pod), cached: fromCache}
	}
	if !fromCache {
		return nil
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container && cs.State.Waiting != nil && cs.LastTerminationState.Terminated == nil {
			return &notStartedError{msg: fmt.Sprintf("container %q in pod %q is waiting to start: %s", container, f.pod, cs.State.Waiting.Reason), cached: true}
		}
	}
	return nil
}

// openLog opens the container's log, timestamped, from the second of the
// copied position.
func (f *logFollower) openLog(ctx context.Context, container string, fromCache bool) (io.ReadCloser, error) {
	opts := &corev1.PodLogOptions{Follow: true, Timestamps: true, Container: container}
	if pos := f.cursor.pos; !pos.Time.IsZero() {
		since := metav1.NewTime(pos.Time.Truncate(time.Second))
		opts.SinceTime = &since
	}
	stream, err := f.kube.CoreV1().Pods(f.namespace).GetLogs(f.pod, opts).Stream(ctx)
	if err == nil {
		return stream, nil
	}
	if apierrors.IsBadRequest(err) && strings.Contains(err.Error(), "is waiting to start") {
		// The kubelet's answer for a container not started yet
		// (k8s.io/kubernetes v1.37 pkg/kubelet/kubelet_pods.go,
		// validateContainerLogStatus), when the cache was behind.
		return nil, &notStartedError{msg: err.Error(), cached: fromCache}
	}
	return nil, fmt.Errorf("opening the log of driver pod %s/%s: %w", f.namespace, f.pod, err)
}

// copy copies the stream to the job's stdout, moving the copied position
// after each write. A refused write is a writeError.
func (f *logFollower) copy(stream io.Reader) error {
	err := copyLog(stream, writerFunc(f.writeStdout), &f.cursor, f.advance)
	if err == nil {
		return nil
	}
	var werr *writeError
	if errors.As(err, &werr) {
		return werr
	}
	return fmt.Errorf("reading the log of driver pod %s/%s: %w", f.namespace, f.pod, err)
}

func (f *logFollower) writeStdout(p []byte) (int, error) {
	n, err := f.stdout.Write(p)
	if err != nil {
		return n, &writeError{err}
	}
	return n, nil
}

// advance records the position of what has been written.
func (f *logFollower) advance(p LogPosition) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p != f.pos {
		f.pos, f.moved = p, true
	}
}

// containerOf picks the driver's container of a pod that may have sidecars.
// It is the one named spark-kubernetes-driver, else the first.
func containerOf(pod *corev1.Pod) string {
	cs := pod.Spec.Containers
	if len(cs) == 0 {
		return ""
	}
	i := slices.IndexFunc(cs, func(c corev1.Container) bool { return c.Name == driverContainer })
	return cs[max(i, 0)].Name // IndexFunc's -1: none is
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
