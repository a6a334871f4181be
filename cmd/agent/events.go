package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/pkg/client"
)

// timeline prints events as rows of time, time since the previous event,
// kind, agent and message. Rows are printed as they come (a followed
// timeline cannot be aligned afterwards), so columns have fixed widths.
type timeline struct {
	w         io.Writer
	noHeaders bool
	prev      time.Time
	rows      int
}

func (t *timeline) header() {
	if t.noHeaders {
		return
	}
	fmt.Fprintf(t.w, "%-24s %8s  %-16s %-14s %s\n", "TIME", "+", "KIND", "AGENT", "MESSAGE")
}

func (t *timeline) row(e api.Event) error {
	delta := "-"
	if t.rows > 0 {
		delta = "+" + fmtDelta(e.At.Sub(t.prev))
	}
	t.prev = e.At
	t.rows++
	prefix := fmt.Sprintf("%-24s %8s  %-16s %-14s ", e.At.Local().Format("2006-01-02T15:04:05.000"), delta, e.Kind, orDash(e.Agent))
	// A multi-line message keeps to the MESSAGE column.
	return hangingLines(t.w, prefix, strings.TrimLeft(e.Message, " \t\r\n"))
}

// fmtDelta renders a duration between events: milliseconds below a second,
// else rounded to a tenth of a second or to a second past a minute.
func fmtDelta(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

func (a *app) eventsCmd() *cobra.Command {
	var (
		follow  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "events <id>",
		Short: "Show a job's timeline: what happened to it, when, and how long between",
		Long: `Show a job's timeline: each event's time, the time since the previous one,
its kind (submitted, claimed, running, released, resumed, ... succeeded), the
agent and its message.

With -f it follows new events until the job ends, reconnecting (to the next
--server, or the same one after a restart) after the last event printed, and
ends with one line on stderr stating the outcome; the exit code is then the
job's: 0 succeeded, 1 failed, 2 canceled, 3 unknown.

-o json prints {"events": [...]}; -o jsonl one event per line (with -f as
they happen); -o yaml the same as json in YAML.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runEvents(cmd.Context(), args[0], follow, timeout)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing events until the job ends; the exit code is its outcome")
	cmd.Flags().DurationVar(&timeout, "wait-timeout", 0, "with -f: give up (exit 3) after this long; 0 follows as long as the job runs")
	return cmd
}

// runEvents prints job id's timeline. With follow, it prints until the job ends
// and returns its outcome as the exit code.
func (a *app) runEvents(ctx context.Context, id string, follow bool, timeout time.Duration) error {
	if err := checkFollowTimeout(follow, timeout); err != nil {
		return err
	}
	if follow && slices.Contains([]string{outJSON, outYAML}, a.output) {
		return fmt.Errorf("--output %s cannot be followed; use -o jsonl with --follow", a.output)
	}
	fo, err := a.failover()
	if err != nil {
		return err
	}
	if !follow {
		return a.printEvents(ctx, fo, id)
	}
	ctx, cancel := waitTimeout(ctx, timeout)
	defer cancel()
	return a.followEvents(ctx, fo, id)
}

// printEvents prints the job's timeline as it is now.
func (a *app) printEvents(ctx context.Context, fo *client.Failover, id string) error {
	var evs []api.Event
	err := fo.Do(ctx, func(ctx context.Context, c *client.Client) error {
		var err error
		evs, err = c.Events(ctx, id)
		return err
	})
	if err != nil {
		return err
	}
	if a.machine() {
		return emitList(a, "events", evs, nil)
	}
	t := &timeline{w: a.stdout, noHeaders: a.noHeaders}
	t.header()
	for _, e := range evs {
		if err := t.row(e); err != nil {
			return err
		}
	}
	return nil
}

// followEvents prints the job's events as they happen until it ends, then
// its outcome on stderr, and returns the outcome as the exit code.
func (a *app) followEvents(ctx context.Context, fo *client.Failover, id string) error {
	t := &timeline{w: a.stdout, noHeaders: a.noHeaders}
	emit := t.row
	if a.machine() {
		emit = func(e api.Event) error { return a.emit(e) }
	} else {
		t.header()
	}
	seen := false
	if _, err := fo.FollowEvents(ctx, id, 0, func(e api.Event) error { seen = true; return emit(e) }); err != nil {
		return gaveUp(ctx, id, seen, err)
	}
	j, err := fo.Get(ctx, id)
	if err != nil {
		return gaveUp(ctx, id, true, err)
	}
	return a.finish(j, false)
}

func (a *app) cleanupsCmd() *cobra.Command {
	var (
		limit int
		after string
		all   bool
	)
	cmd := &cobra.Command{
		Use:   "cleanups",
		Short: "List pending plugin Cleanup calls (those still retrying stay visible)",
		Long: `List the plugin Cleanup calls still pending, in job ID order: the job, its
command and plugin, why the Cleanup is due, how often it was tried, when it is
tried next, the last error and which agent holds it now. A Cleanup that keeps
failing stays here (and in tether_cleanup_backlog) until it succeeds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runCleanups(cmd.Context(), limit, after, all)
		},
	}
	f := cmd.Flags()
	f.IntVar(&limit, "limit", api.DefaultListLimit, fmt.Sprintf("cleanups per page (1-%d)", api.MaxListLimit))
	f.StringVar(&after, "after", "", "start after this cursor (a job ID, from a previous page)")
	f.BoolVar(&all, "all", false, "fetch every page")
	return cmd
}

// runCleanups lists the pending Cleanup calls from after, one page or all.
func (a *app) runCleanups(ctx context.Context, limit int, after string, all bool) error {
	if err := checkLimit(limit); err != nil {
		return err
	}
	list, next, err := fetchPages(a, after, all, func(c *client.Client, after string) ([]api.Cleanup, string, error) {
		return c.Cleanups(ctx, after, limit)
	})
	if err != nil {
		return err
	}
	return printList(a, "cleanups", list, &next, "JOB\tCOMMAND\tPLUGIN\tREASON\tATTEMPTS\tNEXT\tCLAIMED BY\tLAST ERROR", func(w io.Writer, cl api.Cleanup) {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", cl.JobID, cl.Command, cl.Plugin, cl.Reason, cl.Attempts,
			fmtTime(&cl.NextAt), orDash(cl.ClaimedBy), orDash(oneLine(cl.LastError)))
	})
}
