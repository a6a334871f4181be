package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/tetherjobs/tether/internal/agent"
)

// versionInfo is what `tether version` prints; -o json|jsonl|yaml prints it
// as a document.
type versionInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"` // the VCS revision the build recorded
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

func buildVersion() versionInfo {
	v := versionInfo{Version: agent.Version(), Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v.Commit = s.Value
			}
		}
	}
	return v
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print tether's version (-o json: as a document)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := buildVersion()
			return a.show(v, func() error {
				fmt.Fprintf(a.stdout, "tether %s%s (%s %s/%s)\n", v.Version, orEmpty(v.Commit, " "+v.Commit), v.Go, v.OS, v.Arch)
				return nil
			})
		},
	}
}
