package pluginhost

import (
	"bytes"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

const (
	tailLines   = 100 // kept from a plugin's stderr
	reportLines = 12  // shown in a crash error
	maxLineLen  = 512
)

// tail keeps the last lines a plugin process wrote to stderr, so a crash can
// be reported with its cause (usually a panic and its stack).
type tail struct {
	mu    sync.Mutex
	lines []string
}

func (t *tail) add(line string) {
	if len(line) > maxLineLen {
		line = line[:maxLineLen] + "…"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > tailLines {
		t.lines = append(t.lines[:0:0], t.lines[len(t.lines)-tailLines:]...)
	}
}

// report returns up to reportLines lines. They are from the last panic or
// fatal error when there is one (its message, then the top of the stack),
// else the last.
func (t *tail) report() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	start := max(0, len(t.lines)-reportLines)
	for i := len(t.lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(t.lines[i], "panic: ") || strings.HasPrefix(t.lines[i], "fatal error: ") {
			start = i
			break
		}
	}
	end := min(len(t.lines), start+reportLines)
	return strings.Join(t.lines[start:end], "\n")
}

// lineWriter splits what is written into lines and hands each to fn.
type lineWriter struct {
	mu  sync.Mutex
	buf []byte
	fn  func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for i := bytes.IndexByte(w.buf, '\n'); i >= 0; i = bytes.IndexByte(w.buf, '\n') {
		w.fn(strings.TrimRight(string(w.buf[:i]), "\r"))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // a very long line: pass it on in pieces
		w.fn(string(w.buf))
		w.buf = nil
	}
	return len(p), nil
}

// hclogPrefix matches a line hclog formatted without a timestamp: its level,
// then the message.
var hclogPrefix = regexp.MustCompile(`^\[(TRACE|DEBUG|INFO|WARN|ERROR)\](.*)$`)

// hclogLevel maps the level prefix of a line hclog formatted to slog.
func hclogLevel(line string) (slog.Level, string) {
	m := hclogPrefix.FindStringSubmatch(line)
	if m == nil {
		return slog.LevelInfo, line
	}
	rest := strings.TrimSpace(m[2])
	if closingNoise(rest) {
		return slog.LevelDebug, rest
	}
	return slogLevel(hclog.LevelFromString(m[1])), rest
}

// closingNoise reports go-plugin's complaints about a connection that is being
// closed on purpose (the plugin is stopped with its agent). A crash is
// reported separately, with the plugin's stderr.
func closingNoise(msg string) bool {
	return strings.Contains(msg, "yamux") && slices.ContainsFunc(closingWords, func(s string) bool { return strings.Contains(msg, s) })
}

// closingWords are what go-plugin's yamux says of a connection closed on purpose.
var closingWords = []string{"use of closed network connection", "session shutdown", "broken pipe", "connection reset by peer", "EOF"}
