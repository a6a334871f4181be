package claim

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"

	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/plugin"
)

func TestCleanResources(t *testing.T) {
	long := strings.Repeat("é", MaxResourceFieldBytes) // 2 bytes each: cut mid-way
	got := cleanResources([]plugin.Resource{
		{Kind: "ecs_task", Name: "a\x00b", Label: "bad \xff utf-8", URL: "", Command: long},
	})
	assert.Equal(t, "a\uFFFDb", got[0].Name, "NUL cannot go into text nor jsonb")
	assert.Equal(t, "bad \uFFFD utf-8", got[0].Label)
	assert.Equal(t, "ecs_task", got[0].Kind)
	assert.Empty(t, got[0].URL)
	assert.LessOrEqual(t, len(got[0].Command), MaxResourceFieldBytes)
	assert.True(t, utf8.ValidString(got[0].Command), "cut at a rune boundary")
	assert.Equal(t, 0, got[0].Attempt, "the attempt is the host's, set on the event")

	many := make([]plugin.Resource, plugin.MaxResources+1)
	assert.Len(t, cleanResources(many), plugin.MaxResources)
	assert.Equal(t, []store.Resource{}, cleanResources(nil))
}

func TestCleanFieldCutsAtRuneStart(t *testing.T) {
	for _, r := range []string{"a", "é", "€", "𝄞"} { // 1 to 4 bytes
		for pad := range 4 {
			s := strings.Repeat("x", pad) + strings.Repeat(r, MaxResourceFieldBytes+1)
			n := MaxResourceFieldBytes
			for !utf8.RuneStart(s[n]) {
				n--
			}
			assert.Equal(t, s[:n], cleanField(s), "rune %q after %d bytes", r, pad)
		}
	}
	assert.Equal(t, "short \uFFFD", cleanField("short \uFFFD"), "a stored U+FFFD stays")
}
