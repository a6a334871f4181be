package plugin

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"":                                 "''",
		"arn:aws:ecs:eu-west-1:1:task/c/x": "arn:aws:ecs:eu-west-1:1:task/c/x",
		"/ecs/app":                         "/ecs/app",
		"a b":                              "'a b'",
		"$(reboot)":                        "'$(reboot)'",
		"it's":                             `'it'\''s'`,
	} {
		assert.Equal(t, want, ShellQuote(in), "quoting %q", in)
	}
	// The shell reads each quoted word back as it was.
	sh, err := exec.LookPath("sh")
	require.NoError(t, err, "a POSIX sh is needed")
	for _, in := range []string{"a b", "$(reboot)", "it's", "x'; echo pwned '", "tab\there", "`id`"} {
		out, err := exec.Command(sh, "-c", "printf %s "+ShellQuote(in)).Output()
		require.NoError(t, err)
		assert.Equal(t, in, string(out))
	}
}

func TestShellQuoteSafeCharacters(t *testing.T) {
	safe := func(c rune) bool {
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("@%+=:,./_-", c)
	}
	for c := rune(1); c < 0x300; c++ {
		s := "a" + string(c) + "b"
		assert.Equal(t, safe(c), ShellQuote(s) == s, "rune %U", c)
	}
	assert.Equal(t, "'a\xffb'", ShellQuote("a\xffb"), "a byte that is not UTF-8 is quoted")
}

func TestCapResources(t *testing.T) {
	rs := make([]Resource, MaxResources+5)
	for i := range rs {
		rs[i].Name = string(rune('a' + i%26))
	}
	got := capResources(rs)
	assert.Len(t, got, MaxResources)
	assert.Equal(t, rs[0], got[0], "the first ones are kept")
	assert.Len(t, capResources(rs[:3]), 3)
}
