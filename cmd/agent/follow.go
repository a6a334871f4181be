package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/pkg/client"
)

// outcome is the one line that ends a follow, and the exit code that goes
// with it: 0 succeeded, 1 failed, 2 canceled, 3 anything else.
func outcome(j api.Job) (string, int) {
	took := ""
	if j.FinishedAt != nil {
		// Since it was submitted: what the person waiting experienced.
		took = ", " + j.FinishedAt.Sub(j.CreatedAt).Round(time.Second).String()
	}
	tail := fmt.Sprintf(" (attempt %d%s)", j.Attempt, took)
	head := fmt.Sprintf("job %s: %s", j.ID, j.Status)
	switch j.Status {
	case api.StatusSucceeded:
		return head + tail, exitSucceeded
	case api.StatusFailed:
		return head + ": " + orDash(j.Error) + orEmpty(string(j.ErrorClass), " ["+string(j.ErrorClass)+"]") + tail, exitFailed
	case api.StatusCanceled:
		return head + orEmpty(j.Error, ": "+j.Error) + tail, exitCanceled
	default:
		return fmt.Sprintf("job %s is %s: its outcome is not known yet", j.ID, j.Status), exitUnknown
	}
}

// finish prints the outcome line of a finished job on stderr and returns the
// matching exitError (nil for success). With show and a machine -o the job
// goes to stdout too. Without show stdout held the followed stream itself.
func (a *app) finish(j api.JobDetail, show bool) error {
	line, code := outcome(j.Job)
	fmt.Fprintln(a.stderr, line)
	if show && a.machine() {
		if err := a.emit(j); err != nil {
			return &exitError{code: exitUnknown, err: err}
		}
	}
	if code == exitSucceeded {
		return nil
	}
	return &exitError{code: code}
}

// gaveUp is the exit of a follow that ended before the job did. A job the
// server does not know, and the follow never saw, is an error (exit 1), not
// an unknown outcome: there is nothing to wait for. One that vanished while
// followed (retention) stays exit 3.
func gaveUp(ctx context.Context, id string, seen bool, err error) error {
	if !seen && client.IsNotFound(err) {
		return &exitError{code: 1, err: err}
	}
	if ctx.Err() != nil {
		return &exitError{code: exitUnknown, err: fmt.Errorf("stopped following; job %s goes on (tether wait %s picks it up again, tether cancel %s stops it)", id, id, id)}
	}
	return &exitError{code: exitUnknown, err: fmt.Errorf("following job %s: %w", id, err)}
}

// waitTimeout bounds ctx by --wait-timeout (0: no bound).
func waitTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// logPrinter prints followed log records. It prints the job's stdout to out
// and its stderr to errOut, a separator on stderr when the attempt changes,
// and with stamps a stream/time/attempt prefix on each line. With records
// set it writes each record as a JSON line there instead.
type logPrinter struct {
	out, errOut, notices io.Writer
	records              *json.Encoder
	stamps               bool
	attempt              int
	midLine              bool // the last record was partial: no prefix, no separator
	seen                 bool // a record was printed
}

func (p *logPrinter) print(r api.LogLine) error {
	p.seen = true
	if p.records != nil {
		return p.records.Encode(r)
	}
	if p.attempt != 0 && r.Attempt != p.attempt {
		p.endLine()
		fmt.Fprintf(p.notices, "── attempt %d ──\n", r.Attempt)
	}
	p.attempt = r.Attempt
	w := p.out
	if r.Stream == "stderr" {
		w = p.errOut
	}
	var b strings.Builder
	if p.stamps && !p.midLine {
		fmt.Fprintf(&b, "%s %s #%d | ", r.Time.UTC().Format("2006-01-02T15:04:05.000Z"), r.Stream, r.Attempt)
	}
	b.WriteString(r.Line)
	if !r.Partial {
		b.WriteByte('\n')
	}
	p.midLine = r.Partial
	_, err := io.WriteString(w, b.String())
	return err
}

// endLine ends on notices a last line printed without its newline.
func (p *logPrinter) endLine() {
	if p.midLine {
		fmt.Fprintln(p.notices)
		p.midLine = false
	}
}

// followJob follows a job's output across agents until it ends and returns
// the exit of its outcome. split sends the job's stderr to stderr (else both
// streams go to stdout). statuses prints status changes on stderr meanwhile.
func (a *app) followJob(ctx context.Context, id string, q client.LogQuery, split, stamps, statuses bool) error {
	fo, err := a.failover()
	if err != nil {
		return fail(true, err)
	}
	stopStatus := func() {}
	if statuses {
		stopStatus = a.printStatuses(ctx, fo, id)
	}
	defer stopStatus()
	p := a.followPrinter(split, stamps, statuses)
	end, err := fo.FollowLogs(ctx, id, q, p.print)
	if err != nil {
		return gaveUp(ctx, id, p.seen, err)
	}
	p.endLine() // the job's last line may have had no newline
	stopStatus()
	j, err := fo.Get(ctx, id)
	if err != nil {
		// The end record says how it ended. Details are lost, not the outcome.
		j = api.JobDetail{Job: api.Job{ID: id, Status: end.Status, Attempt: end.Attempt}}
	}
	return a.finish(j, p.records == nil)
}

// printStatuses prints the job's status changes on stderr until the func
// it returns is called (more than once is fine), which waits for it to stop.
func (a *app) printStatuses(ctx context.Context, fo *client.Failover, id string) func() {
	var wg sync.WaitGroup
	statusCtx, cancel := context.WithCancel(ctx)
	wg.Go(func() {
		_, _ = fo.Wait(statusCtx, id, a.printStatus)
	})
	return func() { cancel(); wg.Wait() }
}

// printStatus prints a status change of a job that has not ended on stderr.
func (a *app) printStatus(j api.JobDetail) {
	if !j.Status.Terminal() {
		fmt.Fprintf(a.stderr, "job %s: %s\n", j.ID, describeStatus(j.Job))
	}
}

// followPrinter is where a job's output goes. split sends its stderr to
// stderr. Under machine output stdout holds the machine output alone, and
// for `logs -o jsonl` (no statuses) the records themselves are the output.
func (a *app) followPrinter(split, stamps, statuses bool) *logPrinter {
	p := &logPrinter{out: a.stdout, errOut: a.stdout, notices: a.stderr, stamps: stamps}
	switch {
	case !a.machine():
		if split {
			p.errOut = a.stderr
		}
	case statuses:
		p.out, p.errOut = a.stderr, a.stderr
	default:
		p.records = json.NewEncoder(a.stdout)
	}
	return p
}

func (a *app) waitCmd() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait <id>",
		Short: "Wait for a job to end; the exit code is its outcome",
		Long: `Wait for a job to end, printing its status changes on stderr and then one
line stating its outcome. It rides out agent restarts and losses, trying the
next --server, for as long as the job is not finished or --wait-timeout
passes. Exit code: 0 succeeded, 1 failed, 2 canceled, 3 unknown (interrupted
or timed out; the job goes on). With -o json|jsonl|yaml the finished job is
printed on stdout.`,
		Example: `  tether wait 0190f6a2-…
  tether wait "$id" --wait-timeout 1h --server http://a:9090,http://b:9090`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWaitTimeout(timeout); err != nil {
				return fail(true, err)
			}
			fo, err := a.failover()
			if err != nil {
				return fail(true, err)
			}
			ctx, cancel := waitTimeout(cmd.Context(), timeout)
			defer cancel()
			j, err := fo.Wait(ctx, args[0], a.printStatus)
			if err != nil {
				return gaveUp(ctx, args[0], j.ID != "", err)
			}
			return a.finish(j, true)
		},
	}
	cmd.Flags().DurationVar(&timeout, "wait-timeout", 0, "give up (exit 3) after this long; 0 waits as long as the job runs")
	return cmd
}

// checkWaitTimeout validates --wait-timeout.
func checkWaitTimeout(d time.Duration) error {
	if d < 0 {
		return errors.New("--wait-timeout must not be negative")
	}
	return nil
}

// checkFollowTimeout validates --wait-timeout of a command that follows
// only with --follow.
func checkFollowTimeout(follow bool, d time.Duration) error {
	if !follow && d != 0 {
		return errors.New("--wait-timeout needs --follow")
	}
	return checkWaitTimeout(d)
}

// logsFlags are logs' flags.
type logsFlags struct {
	follow  bool
	stream  string
	stamps  bool
	timeout time.Duration
	tail    int
	since   string
}

func (a *app) logsCmd() *cobra.Command {
	var lf logsFlags
	cmd := &cobra.Command{
		Use:   "logs <id>",
		Short: "Print a job's output (both streams, in write order, unless --stream)",
		Long: `Print a job's output: both streams in the order the job wrote them, unless
--stream picks one. A line "── attempt N ──" on stderr separates attempts;
--stamps prefixes each line with its time, stream and attempt. --tail N
prints the last N lines only, --since the output received from a time on
(an RFC 3339 time, or a duration ago by the database's clock); the server
sends only those.

With -f it follows the output until the job ends, reconnecting (to the next
--server, or the same one after a restart) and resuming after the last line
it printed, so no line is lost or repeated; it ends with one line on stderr
stating the outcome and exits with it: 0 succeeded, 1 failed, 2 canceled,
3 unknown (interrupted, or --wait-timeout passed). Without -f the exit code
is 0 once the output was printed.

-o json or jsonl prints each line as a JSON record on stdout:
{"seq","attempt","stream","time","line","partial"}.`,
		Example: `  tether logs "$id" --tail 20 -f
  tether logs "$id" --since 10m --stream stderr
  tether logs "$id" --since 2026-12-01T09:00:00Z`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := a.logQuery(lf)
			if err != nil {
				return err
			}
			if lf.follow {
				ctx, cancel := waitTimeout(cmd.Context(), lf.timeout)
				defer cancel()
				return a.followJob(ctx, args[0], q, false, lf.stamps, false)
			}
			return a.printLogs(cmd.Context(), args[0], q, lf.stamps)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&lf.follow, "follow", "f", false, "keep printing output until the job ends; the exit code is its outcome")
	f.StringVar(&lf.stream, "stream", "", "only stdout or stderr")
	f.BoolVar(&lf.stamps, "stamps", false, "prefix each line with its time, stream and attempt")
	f.DurationVar(&lf.timeout, "wait-timeout", 0, "with -f: give up (exit 3) after this long; 0 follows as long as the job runs")
	f.IntVar(&lf.tail, "tail", -1, "only the last N lines (-1: all)")
	f.StringVar(&lf.since, "since", "", "only output received at or after this time (RFC 3339) or within this long (10m, 2h)")
	return cmd
}

// logQuery checks logs' flags and returns the query they make.
func (a *app) logQuery(lf logsFlags) (client.LogQuery, error) {
	q := client.LogQuery{Stream: lf.stream}
	if !slices.Contains([]string{"", "stdout", "stderr"}, lf.stream) {
		return q, fmt.Errorf("--stream must be stdout or stderr, got %q", lf.stream)
	}
	if a.output == outYAML {
		return q, errors.New("--output yaml: logs are a stream of records; use -o jsonl")
	}
	if lf.tail == 0 || lf.tail < -1 || lf.tail > api.MaxLogTail {
		return q, fmt.Errorf("--tail must be a number of lines from 1 to %d, or -1 for all, got %d", api.MaxLogTail, lf.tail)
	}
	q.Tail = max(lf.tail, 0)
	if d, err := time.ParseDuration(lf.since); err == nil && d > 0 {
		q.SinceAgo = d
	} else if lf.since != "" {
		t, err := time.Parse(time.RFC3339Nano, lf.since)
		if err != nil {
			return q, fmt.Errorf("--since must be an RFC 3339 time such as 2026-12-01T09:00:00Z or a duration ago such as 10m, got %q", lf.since)
		}
		q.Since = t
	}
	return q, checkFollowTimeout(lf.follow, lf.timeout)
}

// printLogs prints the job's output written so far that q selects.
func (a *app) printLogs(ctx context.Context, id string, q client.LogQuery, stamps bool) error {
	fo, err := a.failover()
	if err != nil {
		return err
	}
	p := a.followPrinter(false, stamps, false)
	err = fo.Do(ctx, func(ctx context.Context, c *client.Client) error {
		_, err := c.LogRecords(ctx, id, q, p.print)
		return err
	})
	if err == nil && p.midLine {
		fmt.Fprintln(a.stdout)
	}
	return err
}
