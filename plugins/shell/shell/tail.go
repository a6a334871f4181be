package shell

import (
	"bytes"
	"strings"
	"sync"
)

// Bounds of the stderr tail quoted in a failed job's error.
const (
	tailLines    = 10
	tailBytes    = 8 << 10
	tailLineMax  = 400
	tailEllipsis = "…"
)

// tailBuffer keeps roughly the last tailBytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*tailBytes {
		// Amortised trim: copy down only when twice the bound.
		n := copy(t.buf, t.buf[len(t.buf)-tailBytes:])
		t.buf = t.buf[:n]
	}
	return len(p), nil
}

// lines returns up to n last non-empty lines, each valid UTF-8 and shortened
// to tailLineMax bytes, since they end up in an error message.
func (t *tailBuffer) lines(n int) []string {
	t.mu.Lock()
	b := bytes.Clone(t.buf[max(0, len(t.buf)-tailBytes):])
	t.mu.Unlock()
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimRight(strings.ToValidUTF8(l, "\uFFFD"), "\r")
		if strings.TrimSpace(l) == "" {
			continue
		}
		if len(l) > tailLineMax {
			l = strings.ToValidUTF8(l[:tailLineMax], "") + tailEllipsis
		}
		out = append(out, l)
	}
	return out[max(0, len(out)-n):]
}
