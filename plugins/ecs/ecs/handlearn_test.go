package ecs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Task ARNs share the handle's prefix: the first ARN's up to its last '/'.
func TestHandleARNPrefix(t *testing.T) {
	h := &Handle{}
	var a, b, c TaskState
	h.setARN(&a, "arn:aws:ecs:r:1:task/prod/abc")
	require.Equal(t, "arn:aws:ecs:r:1:task/prod/", h.ARNPrefix)
	require.Equal(t, "abc", a.ID)
	h.setARN(&b, "arn:aws:ecs:r:1:task/other/def") // another cluster: kept whole
	require.Equal(t, "arn:aws:ecs:r:1:task/other/def", b.ID)
	require.Equal(t, "arn:aws:ecs:r:1:task/prod/abc", h.taskARN(&a))
	require.Equal(t, "arn:aws:ecs:r:1:task/other/def", h.taskARN(&b))
	require.Equal(t, "", h.taskARN(&c))
	c.Prev = []string{"abc", "arn:aws:ecs:r:1:task/other/def"}
	require.Equal(t, []string{"arn:aws:ecs:r:1:task/prod/abc", "arn:aws:ecs:r:1:task/other/def"}, h.prevARNs(&c))

	// An ARN without '/' sets no prefix.
	h = &Handle{}
	h.setARN(&a, "no-slash")
	require.Equal(t, "", h.ARNPrefix)
	require.Equal(t, "no-slash", a.ID)
	require.Equal(t, "x", h.shorten("x"))
}

func TestConsoleEscapes(t *testing.T) {
	require.Equal(t, "a-Z_9.!~*'()%2F%20%3A%25", consolePath("a-Z_9.!~*'()/ :%"))
	require.Equal(t, "%C3%BC", consolePath("ü"))
	require.Equal(t, "grp$252Fsub$2520x", cloudWatchEscape("grp/sub x"))
}
