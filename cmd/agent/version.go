package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/tetherjobs/tether/internal/agent"
)

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print tether's version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			rev := ""
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						rev = " " + s.Value
					}
				}
			}
			fmt.Fprintf(a.stdout, "tether %s%s (%s %s/%s)\n", agent.Version(), rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
