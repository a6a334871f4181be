package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

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
			c, err := a.client()
			if err != nil {
				return err
			}
			cmds, err := c.Commands(cmd.Context())
			if err != nil {
				return err
			}
			if a.machine() {
				return emitList(a, "commands", cmds, nil)
			}
			tw := a.table()
			fmt.Fprintln(tw, "NAME\tPLUGIN\tSERVED\tAGENTS\tDRAINING\tUNHEALTHY\tQUEUED\tOLDEST")
			for _, c := range cmds {
				served := "yes"
				if !c.Served {
					served = "no"
				}
				oldest := "-"
				if c.OldestQueuedSeconds != nil {
					oldest = (time.Duration(*c.OldestQueuedSeconds * float64(time.Second))).Round(time.Second).String()
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", c.Name, orDash(c.Plugin), served,
					orDash(strings.Join(c.Agents, ",")), orDash(strings.Join(c.Draining, ",")), orDash(strings.Join(c.Unhealthy, ",")), c.Queued, oldest)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			// Hints below the table, one per unserved command.
			blank := true
			for _, c := range cmds {
				if c.Hint == "" {
					continue
				}
				if blank {
					fmt.Fprintln(a.stdout)
					blank = false
				}
				fmt.Fprintln(a.stdout, c.Hint)
			}
			return nil
		},
	}
}
