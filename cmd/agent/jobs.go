package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/pkg/client"
)

func (a *app) table() *tabwriter.Writer {
	return tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
}

func fmtTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

// fmtTimeIfSet is fmtTime of a time that may be unset, "" when it is.
func fmtTimeIfSet(t *time.Time) string {
	if t == nil {
		return ""
	}
	return fmtTime(t)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *app) getCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get <id>",
		Short: "Show a job",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			j, err := call(a, func(c *client.Client) (api.JobDetail, error) { return c.Get(cmd.Context(), args[0]) })
			if err != nil {
				return err
			}
			return a.show(j, func() error { return a.printJob(j) })
		},
	}
}

// printJob prints the job as a table of its fields. The optional fields
// without a value are left out.
func (a *app) printJob(j api.JobDetail) error {
	tw := a.table()
	row := func(k, v string) {
		// A multi-line value (an error, a plugin's message) keeps to the
		// value column: its further lines have an empty key cell.
		key := k + ":"
		for _, l := range messageLines(v) {
			fmt.Fprintf(tw, "%s\t%s\n", key, l)
			key = ""
		}
	}
	opt := func(k, v string) {
		if v != "" {
			row(k, v)
		}
	}
	row("ID", j.ID)
	row("Command", j.Command)
	row("Plugin", j.Plugin)
	row("Status", string(j.Status))
	row("Attempt", fmt.Sprint(j.Attempt))
	row("Submitter", orDash(j.Submitter))
	row("Agent", orDash(j.Agent))
	row("Created", fmtTime(&j.CreatedAt))
	row("Started", fmtTime(j.StartedAt))
	row("Finished", fmtTime(j.FinishedAt))
	opt("Error", orEmpty(j.Error, j.Error+orEmpty(string(j.ErrorClass), " ("+string(j.ErrorClass)+")")))
	l := j.Limits
	row("Limits", fmt.Sprintf("max_retry=%d retry_backoff=%s retry_backoff_max=%s pending_timeout=%s active_timeout=%s ttl_succeeded=%s ttl_failed=%s",
		l.MaxRetry, api.FormatDuration(l.RetryBackoff), api.FormatDuration(l.RetryBackoffMax), api.FormatDuration(l.PendingTimeout),
		api.FormatDuration(l.ActiveTimeout), api.FormatDuration(l.TTLSucceeded), api.FormatDuration(l.TTLFailed)))
	for _, r := range j.Resources {
		row("Resource", fmt.Sprintf("#%d %s %s", r.Attempt, r.Kind, r.Name)+orEmpty(r.URL, " "+r.URL))
	}
	opt("Next attempt", fmtTimeIfSet(j.RunAfter))
	if j.WaitingForCleanup {
		row("Next attempt", "after the last attempt's Cleanup")
	}
	opt("Expires", fmtTimeIfSet(j.ExpiresAt))
	row("Context", string(j.Context))
	opt("Result", string(j.Result))
	return tw.Flush()
}

// jobStatuses are the job statuses --status accepts, as the API does.
func jobStatuses() []string {
	var out []string
	for _, s := range api.Statuses() {
		out = append(out, string(s))
	}
	return out
}

// timeFlag reads --since/--until: an RFC 3339 time, or a positive duration
// meaning that long before now. "" is unbounded.
func timeFlag(name, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("--%s must be an RFC 3339 time such as 2026-12-01T09:00:00Z or a duration ago such as 2h, got %q (field %s)", name, v, name)
	}
	return t, nil
}

func validStatus(s string) bool { return slices.Contains(jobStatuses(), s) }

// checkLimit checks --limit against the API's bounds (1..1000). 0 is an
// error, not the server's default.
func checkLimit(n int) error {
	if n < 1 || n > api.MaxListLimit {
		return fmt.Errorf("--limit must be between 1 and %d, got %d", api.MaxListLimit, n)
	}
	return nil
}

func orEmpty(cond, s string) string {
	if cond == "" {
		return ""
	}
	return s
}

func (a *app) cancelCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel <id>",
		Short: "Cancel a job (a queued job at once; a running one is stopped by its agent)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			j, err := call(a, func(c *client.Client) (api.Job, error) { return c.Cancel(cmd.Context(), args[0], reason) })
			if err != nil {
				return err
			}
			return a.show(j, func() error {
				switch j.Status {
				case api.StatusCanceling:
					fmt.Fprintf(a.stdout, "job %s: canceling (its agent is stopping it)\n", j.ID)
				default:
					fmt.Fprintf(a.stdout, "job %s: %s\n", j.ID, j.Status)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why; recorded in the job's events")
	return cmd
}

func (a *app) requeueCmd() *cobra.Command {
	var req api.RequeueRequest
	cmd := &cobra.Command{
		Use:   "requeue <id>",
		Short: "Run a failed or canceled job again as a new attempt (audited)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if req.Reason == "" {
				return fmt.Errorf("--reason is required: say why the job should run again")
			}
			res, err := call(a, func(c *client.Client) (api.RequeueResponse, error) { return c.Requeue(cmd.Context(), args[0], req) })
			if err != nil {
				return err
			}
			return a.show(res, func() error {
				note := ""
				if res.Replayed {
					note = " (replayed: this key was already used for the same request)"
				}
				fmt.Fprintf(a.stdout, "job %s: %s, attempt %d%s\n", res.Job.ID, res.Job.Status, res.Job.Attempt, note)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&req.Reason, "reason", "", "why the job should run again (required; recorded in its events)")
	cmd.Flags().StringVar(&req.Key, "key", "", "idempotency key: resending the same request with it is harmless")
	return cmd
}

func (a *app) jobsCmd() *cobra.Command {
	var (
		o            client.ListOptions
		all          bool
		since, until string
	)
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List jobs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runJobs(cmd.Context(), o, all, since, until)
		},
	}
	f := cmd.Flags()
	f.StringVar((*string)(&o.Status), "status", "", "only jobs in this status (queued, accepted, running, canceling, succeeded, failed, canceled)")
	f.StringVar(&o.Command, "command", "", "only jobs of this command")
	f.StringVar(&o.Submitter, "submitter", "", "only jobs of this submitter")
	f.StringVar(&o.IdempotencyKey, "key", "", "only jobs submitted with this idempotency key")
	f.StringVar(&o.Agent, "agent", "", "only the jobs this agent holds now")
	f.StringVar(&since, "since", "", "only jobs created at or after this time (RFC 3339, or a duration ago such as 2h)")
	f.StringVar(&until, "until", "", "only jobs created before this time (RFC 3339, or a duration ago such as 30m)")
	f.IntVar(&o.Limit, "limit", 50, "jobs per page (1-1000)")
	f.StringVar(&o.After, "after", "", "start after this cursor (from a previous page)")
	f.BoolVar(&all, "all", false, "fetch every page")
	return cmd
}

// runJobs lists the jobs o selects, one page or all, newest first.
func (a *app) runJobs(ctx context.Context, o client.ListOptions, all bool, since, until string) error {
	if err := listFilters(&o, since, until); err != nil {
		return err
	}
	jobs, next, err := fetchPages(a, o.After, all, func(c *client.Client, after string) ([]api.Job, string, error) {
		o.After = after
		return c.List(ctx, o)
	})
	if err != nil {
		return err
	}
	now := time.Now()
	return printList(a, "jobs", jobs, &next, "ID\tCOMMAND\tSTATUS\tATTEMPT\tSUBMITTER\tAGENT\tAGE\tDURATION", func(w io.Writer, j api.Job) {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", j.ID, j.Command, j.Status, j.Attempt,
			orDash(j.Submitter), orDash(j.Agent), humanDuration(now.Sub(j.CreatedAt)), jobDuration(j, now))
	})
}

// fetchPages fetches, with the client of the first --server, the page after
// the cursor after and, with all, every page that follows. It returns what
// it fetched and the cursor of the page after the last ("" at the end).
func fetchPages[T any](a *app, after string, all bool, page func(c *client.Client, after string) ([]T, string, error)) ([]T, string, error) {
	c, err := a.client()
	if err != nil {
		return nil, "", err
	}
	var list []T
	next := after
	for {
		items, n, err := page(c, next)
		if err != nil {
			return nil, "", err
		}
		list, next = append(list, items...), n
		if !all || next == "" {
			return list, next, nil
		}
	}
}

// listFilters checks jobs' --limit and --status and reads --since and
// --until into o.
func listFilters(o *client.ListOptions, since, until string) error {
	if err := checkLimit(o.Limit); err != nil {
		return err
	}
	if o.Status != "" && !validStatus(string(o.Status)) {
		// The API's words, with the flag and the field named.
		return fmt.Errorf("--status must be one of %s, got %q (field status)", strings.Join(jobStatuses(), ", "), o.Status)
	}
	var err error
	now := time.Now()
	if o.Since, err = timeFlag("since", since, now); err != nil {
		return err
	}
	o.Until, err = timeFlag("until", until, now)
	return err
}

func (a *app) agentsCmd() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "List agents (--all: every agents row) and their liveness",
		Long: `List the agents running or draining and seen within agent.stale_job (the
server's, or the agent's own when longer). --all lists every agents row,
stopped and silent ones too, until agent.agent_retention prunes them.

LIVENESS is the rule the janitor acts by (docs/operations.md, "Who is
alive"): stopped (it stopped cleanly), dead (its name lock free and it
silent past dead_after: the janitor has taken its resumable and accepted
jobs), stale (silent past stale_job), late (silent past 3 of its
keepalives: frozen or cut off when its name lock is held), live or
draining. REASON says why.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			agents, err := call(a, func(c *client.Client) ([]api.Agent, error) { return c.ListAgents(cmd.Context(), all) })
			if err != nil {
				return err
			}
			return printList(a, "agents", agents, nil, "NAME\tSTATE\tLIVENESS\tACTIVE\tCAPACITY\tLAST SEEN\tVERSION\tCOMMANDS\tREASON", func(w io.Writer, ag api.Agent) {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s ago\t%s\t%s\t%s\n", ag.Name, agentState(ag), orDash(ag.Liveness), ag.ActiveJobs, ag.Capacity,
					(time.Duration(ag.SilentFor * float64(time.Second))).Round(time.Second), orDash(ag.Version),
					orDash(strings.Join(ag.Commands, ",")), orDash(oneLine(ag.Reason)))
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "list every agents row: stopped and silent agents too")
	return cmd
}

// agentState is the STATE cell: the state, and a drain request the agent
// has not acted on yet (who asked is in -o json and the console).
func agentState(ag api.Agent) string {
	if ag.DrainRequest != nil && ag.State == "running" {
		return ag.State + " (drain requested)"
	}
	return ag.State
}
