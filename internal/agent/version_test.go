package agent

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The version a build stamps wins. Without one, the module's version from
// the build info, which Go stamps from the tag for go install module@v and
// from git in a checkout; a build with neither (tests, -buildvcs=false) is
// "dev".
func TestVersionComesFromTheBuild(t *testing.T) {
	want := "dev"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		want = bi.Main.Version
	}
	assert.Equal(t, want, Version())

	old := buildVersion
	t.Cleanup(func() { buildVersion = old })
	buildVersion = "v1.4.2"
	assert.Equal(t, "v1.4.2", Version())
}
