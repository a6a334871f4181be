package agent

import (
	"cmp"
	"runtime/debug"
)

// buildVersion is the release version a build stamps with
// -ldflags "-X github.com/tetherjobs/tether/internal/agent.buildVersion=v1.2.3"
// (the Dockerfile does). Empty in other builds.
var buildVersion string

// Version is the agent's version, recorded in its registration and metrics:
// the one the build stamped, else the main module's from the build info
// (go install module@v1.2.3 gives v1.2.3; a build in a git checkout, a
// pseudo-version from its tag and commit), else "dev".
func Version() string {
	var module string
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "(devel)" {
		module = bi.Main.Version
	}
	return cmp.Or(buildVersion, module, "dev")
}
