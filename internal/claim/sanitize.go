package claim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

// Limits on what a plugin's answer may put into the database.
const (
	// MaxErrorBytes bounds a stored error or event message. The start and the
	// end of a longer one are kept (a stderr tail ends with the cause).
	MaxErrorBytes = 64 << 10
	// MaxResultBytes bounds a job's JSON result.
	MaxResultBytes = 1 << 20
)

// sanitize makes an outcome storable at the host boundary, so a plugin's
// answer can never become a write the database refuses forever. Text gets
// valid UTF-8 without NUL bytes (PostgreSQL text cannot hold them) and a
// bounded size. A result that is not JSON, or too large, or holds a \u0000
// escape (jsonb refuses it), turns the outcome into a permanent failure
// saying so.
func sanitize(o store.Outcome) store.Outcome {
	o.Error = cleanText(o.Error)
	o.Message = cleanText(o.Message)
	if len(o.Result) == 0 {
		return o
	}
	var why string
	switch {
	case len(o.Result) > MaxResultBytes:
		why = fmt.Sprintf("is %d bytes, over tether's limit of %d", len(o.Result), MaxResultBytes)
	case !json.Valid(o.Result):
		why = "is not valid JSON"
	case bytes.Contains(o.Result, []byte(`\u0000`)):
		why = `holds a NUL character (\u0000), which PostgreSQL cannot store`
	}
	if why == "" {
		return o
	}
	msg := fmt.Sprintf("the plugin's result %s (the job had %s)", why, o.Status)
	if o.Error != "" {
		msg += ": " + o.Error
	}
	return store.Outcome{Status: store.StatusFailed, ErrorClass: plugin.Permanent, Error: cleanText(msg)}
}

// storable is s as valid UTF-8 without NUL bytes.
func storable(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// cleanText is s as valid UTF-8 without NUL bytes, cut to MaxErrorBytes.
func cleanText(s string) string {
	s = storable(s)
	if len(s) <= MaxErrorBytes {
		return s
	}
	head, tail := s[:MaxErrorBytes*3/4], s[len(s)-MaxErrorBytes/4:]
	head, tail = strings.ToValidUTF8(head, ""), strings.ToValidUTF8(tail, "")
	return head + fmt.Sprintf("\n[tether: %d bytes cut]\n", len(s)-len(head)-len(tail)) + tail
}

// firstLine is the first line of s.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// MaxResourceFieldBytes bounds each text of a resource a plugin describes.
const MaxResourceFieldBytes = 4 << 10

// cleanResources makes a plugin's description storable. Each field gets valid
// UTF-8 without NUL bytes (job_resources reads the event as jsonb, which
// refuses \u0000) and at most MaxResourceFieldBytes. It keeps at most
// plugin.MaxResources of them.
func cleanResources(rs []plugin.Resource) []store.Resource {
	rs = rs[:min(len(rs), plugin.MaxResources)]
	out := make([]store.Resource, len(rs))
	for i, r := range rs {
		out[i] = store.Resource{Kind: cleanField(r.Kind), Name: cleanField(r.Name), Label: cleanField(r.Label),
			URL: cleanField(r.URL), Command: cleanField(r.Command)}
	}
	return out
}

func cleanField(s string) string {
	s = storable(s)
	// The cut may split a rune. ToValidUTF8 drops its leading bytes.
	return strings.ToValidUTF8(s[:min(len(s), MaxResourceFieldBytes)], "")
}
