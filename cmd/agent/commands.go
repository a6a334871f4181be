package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/pkg/client"
)

// yesNo renders a flag as the tables write it.
var yesNo = map[bool]string{true: "yes", false: "no"}

func (a *app) commandsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "commands",
		Short: "List commands: which live agents serve each, and what is queued",
		Long: `List every command the server's config knows or any agent announces: its
plugin, the live agents serving it, the draining ones, its queued jobs and how
long the oldest has waited. A command no live, non-draining agent serves is
marked "no" with a hint: its jobs wait queued until one does. UNHEALTHY lists
the live agents that serve it but claim none of its jobs because its plugin
fails its health check there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmds, err := call(a, func(c *client.Client) ([]api.Command, error) { return c.Commands(cmd.Context()) })
			if err != nil {
				return err
			}
			// Hints go below the table, one per unserved command.
			var hints []string
			err = printList(a, "commands", cmds, nil, "NAME\tPLUGIN\tSERVED\tAGENTS\tDRAINING\tUNHEALTHY\tQUEUED\tOLDEST", func(w io.Writer, c api.Command) {
				oldest := "-"
				if c.OldestQueuedSeconds != nil {
					oldest = (time.Duration(*c.OldestQueuedSeconds * float64(time.Second))).Round(time.Second).String()
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", c.Name, orDash(c.Plugin), yesNo[c.Served],
					orDash(strings.Join(c.Agents, ",")), orDash(strings.Join(c.Draining, ",")), orDash(strings.Join(c.Unhealthy, ",")), c.Queued, oldest)
				if c.Hint != "" {
					hints = append(hints, c.Hint)
				}
			})
			if err != nil {
				return err
			}
			if len(hints) > 0 {
				fmt.Fprintf(a.stdout, "\n%s\n", strings.Join(hints, "\n"))
			}
			return nil
		},
	}
}
