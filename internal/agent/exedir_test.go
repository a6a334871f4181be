package agent

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestExecutableDir(t *testing.T) {
	noProc := func() (string, error) { return "", errors.New("readlink /proc/self/exe: no such file or directory") }
	for _, tc := range []struct {
		name       string
		executable func() (string, error)
		argv0      string
		want       string
		wantErr    bool
	}{
		{"from /proc", func() (string, error) { return "/opt/tether/bin/tether", nil }, "tether", "/opt/tether/bin", false},
		{"no /proc, absolute argv[0]", noProc, "/usr/local/bin/tether", "/usr/local/bin", false},
		{"no /proc, relative argv[0]", noProc, "tether", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := executableDir(tc.executable, tc.argv0)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.wantErr, err != nil, "err: %v", err)
		})
	}
}
