package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tetherjobs/tether/internal/limits"
	"github.com/tetherjobs/tether/pkg/api"
	"github.com/tetherjobs/tether/pkg/client"
)

// Exit codes of `submit --wait`.
const (
	exitSucceeded = 0
	exitFailed    = 1
	exitCanceled  = 2
	exitUnknown   = 3
)

// submitFlags are submit's flags.
type submitFlags struct {
	contextArg string
	sets       []string
	setJSON    []string
	key        string
	limitArgs  []string
	submitter  string
	wait       bool
	stamps     bool
	timeout    time.Duration
}

func (a *app) submitCmd() *cobra.Command {
	var sf submitFlags
	cmd := &cobra.Command{
		Use:   "submit <command>",
		Short: "Submit a job",
		Long: `Submit a job of a configured command. The job's context is --context (a JSON
object, or @file to read one) with --set key=value (a string) and
--set-json key=<json> applied on top; dotted keys build nested objects
(--set env.GREETING=hi).

With --wait, status changes are printed to stderr and the job's output is
streamed (its stdout to stdout, its stderr to stderr) until it ends, across
agent restarts and losses (see "tether logs -f"); one line on stderr then
states the outcome, and the exit code is the job's: 0 succeeded, 1 failed,
2 canceled, 3 unknown (the submit was rejected, the wait was interrupted or
--wait-timeout passed). With --wait -o json|jsonl|yaml stdout holds the
finished job alone: the job's output goes to stderr.`,
		Example: `  tether submit hello
  tether submit hello --set script='echo hi' --wait
  tether submit report --context @ctx.json --key nightly-2024-06-01
  tether submit report --limit active_timeout=2h --limit max_retry=0`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runSubmit(cmd.Context(), args[0], sf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&sf.contextArg, "context", "", "job context: a JSON object, or @file")
	f.StringArrayVar(&sf.sets, "set", nil, "set a context key to a string: key=value (repeatable; dotted keys nest)")
	f.StringArrayVar(&sf.setJSON, "set-json", nil, "set a context key to a JSON value: key=<json> (repeatable)")
	f.StringVar(&sf.key, "key", "", "idempotency key: resubmitting the same request returns the same job")
	f.StringArrayVar(&sf.limitArgs, "limit", nil, "override a lifecycle lever for this job: lever=value, e.g. max_retry=0 or active_timeout=2h (repeatable; bounded by the command's limits.max)")
	f.StringVar(&sf.submitter, "submitter", "", "who submits (ignored when the server uses tokens: the token's name is used)")
	f.BoolVar(&sf.wait, "wait", false, "wait for the job to end, streaming its output; the exit code reflects its outcome")
	f.BoolVar(&sf.stamps, "stamps", false, "with --wait: prefix each output line with its time, stream and attempt")
	f.DurationVar(&sf.timeout, "wait-timeout", 0, "with --wait: give up (exit 3) after this long; 0 waits as long as the job runs")
	return cmd
}

// runSubmit submits a job of command and, with --wait, follows it to its
// end.
func (a *app) runSubmit(ctx context.Context, command string, sf submitFlags) error {
	if err := sf.check(); err != nil {
		return err
	}
	req, err := sf.request(command)
	if err != nil {
		return fail(sf.wait, err)
	}
	c, err := a.client()
	if err != nil {
		return fail(sf.wait, err)
	}
	job, created, err := c.Submit(ctx, req)
	if err != nil {
		return fail(sf.wait, fmt.Errorf("submitting: %w", err))
	}
	if job.Status == api.StatusQueued {
		a.warnUnserved(ctx, c, job.Command)
	}
	if !sf.wait {
		return a.reportSubmitted(job, created)
	}
	return a.waitSubmitted(ctx, job, created, sf)
}

// check refuses flags that need --wait without it.
func (sf submitFlags) check() error {
	if err := checkWaitTimeout(sf.timeout); err != nil {
		return fail(sf.wait, err)
	}
	if !sf.wait && (sf.stamps || sf.timeout != 0) {
		return errors.New("--stamps and --wait-timeout need --wait")
	}
	return nil
}

// waitSubmitted says on stderr which job it waits for, then follows it to
// its end (--wait).
func (a *app) waitSubmitted(ctx context.Context, job api.Job, created bool, sf submitFlags) error {
	if created {
		fmt.Fprintf(a.stderr, "submitted job %s (%s)\n", job.ID, job.Command)
	} else {
		fmt.Fprintf(a.stderr, "job %s was already submitted with this idempotency key\n", job.ID)
	}
	ctx, cancel := waitTimeout(ctx, sf.timeout)
	defer cancel()
	return a.waitForJob(ctx, job.ID, sf.stamps)
}

// request builds the submit request from the flags.
func (sf submitFlags) request(command string) (api.SubmitRequest, error) {
	jobCtx, err := buildContext(sf.contextArg, sf.sets, sf.setJSON)
	if err != nil {
		return api.SubmitRequest{}, err
	}
	lim, err := parseLimitFlags(sf.limitArgs)
	if err != nil {
		return api.SubmitRequest{}, err
	}
	return api.SubmitRequest{
		Command: command, Context: jobCtx, IdempotencyKey: sf.key, Submitter: sf.submitter, Limits: lim,
	}, nil
}

// reportSubmitted prints the job submit returned, without --wait.
func (a *app) reportSubmitted(job api.Job, created bool) error {
	return a.show(job, func() error {
		verb := "submitted"
		if !created {
			verb = "already submitted with this idempotency key:"
		}
		fmt.Fprintf(a.stdout, "%s job %s (%s, %s)\n", verb, job.ID, job.Command, job.Status)
		return nil
	})
}

// warnUnserved says on stderr when no live agent serves command, so a
// queued job is not left waiting with no hint. Best effort. A failed lookup
// says nothing.
func (a *app) warnUnserved(ctx context.Context, c *client.Client, command string) {
	cmds, err := c.Commands(ctx)
	if err != nil {
		return
	}
	i := slices.IndexFunc(cmds, func(cmd api.Command) bool { return cmd.Name == command })
	if i >= 0 && !cmds[i].Served {
		fmt.Fprintf(a.stderr, "notice: %s\n", cmds[i].Hint)
	}
}

// fail turns an error before the job's outcome is known into exit code 3
// under --wait (1 otherwise), so a script never reads it as "the job failed".
func fail(wait bool, err error) error {
	if wait {
		return &exitError{code: exitUnknown, err: err}
	}
	return err
}

// waitForJob prints status changes, streams the job's output across agent
// restarts and losses, and returns an exitError carrying the job's outcome.
func (a *app) waitForJob(ctx context.Context, id string, stamps bool) error {
	return a.followJob(ctx, id, client.LogQuery{}, true, stamps, true)
}

// describeStatus describes the status of a job that has not ended.
func describeStatus(j api.Job) string {
	s := string(j.Status)
	if j.Attempt > 1 {
		s += fmt.Sprintf(" (attempt %d)", j.Attempt)
	}
	return s + orEmpty(j.Agent, " on "+j.Agent) + orEmpty(j.Error, ": "+j.Error)
}

// buildContext assembles the job context from --context, --set and --set-json.
func buildContext(base string, sets, setJSON []string) (json.RawMessage, error) {
	if base == "" && len(sets)+len(setJSON) == 0 {
		return nil, nil
	}
	obj, err := readContextFlag(base)
	if err != nil {
		return nil, err
	}
	if err := applyAssignments(obj, "--set", "key=value", sets, func(v string) (any, error) { return v, nil }); err != nil {
		return nil, err
	}
	if err := applyAssignments(obj, "--set-json", "key=<json>", setJSON, parseJSONValue); err != nil {
		return nil, err
	}
	b, _ := json.Marshal(obj) // strings and values decoded from JSON: cannot fail
	return b, nil
}

// readContextFlag reads --context: a JSON object, or @file holding one.
func readContextFlag(base string) (map[string]any, error) {
	obj := map[string]any{}
	if base == "" {
		return obj, nil
	}
	raw := []byte(base)
	if name, ok := strings.CutPrefix(base, "@"); ok {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("--context: %w", err)
		}
		raw = b
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("--context must be a JSON object: %v", err)
	}
	if obj == nil {
		return nil, errors.New("--context must be a JSON object: got null")
	}
	return obj, nil
}

// applyAssignments applies the key=value arguments of flag (--set,
// --set-json) to obj, each value turned by value. want is the form it
// names when an argument has no key.
func applyAssignments(obj map[string]any, flag, want string, args []string, value func(string) (any, error)) error {
	for _, s := range args {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("%s %q: want %s", flag, s, want)
		}
		val, err := value(v)
		if err != nil {
			return fmt.Errorf("%s %q: %w", flag, s, err)
		}
		if err := setPath(obj, k, val); err != nil {
			return fmt.Errorf("%s %q: %w", flag, s, err)
		}
	}
	return nil
}

// parseJSONValue reads the value of a --set-json argument.
func parseJSONValue(v string) (any, error) {
	var val any
	if err := json.Unmarshal([]byte(v), &val); err != nil {
		return nil, fmt.Errorf("value is not JSON: %v", err)
	}
	return val, nil
}

// setPath sets a dotted key ("env.GREETING") in obj, creating objects.
func setPath(obj map[string]any, key string, val any) error {
	parts := strings.Split(key, ".")
	for i, p := range parts[:len(parts)-1] {
		if p == "" {
			return errors.New("empty key segment")
		}
		next, ok := obj[p].(map[string]any)
		if !ok {
			if _, exists := obj[p]; exists {
				return fmt.Errorf("%s is not an object", strings.Join(parts[:i+1], "."))
			}
			next = map[string]any{}
			obj[p] = next
		}
		obj = next
	}
	last := parts[len(parts)-1]
	if last == "" {
		return errors.New("empty key segment")
	}
	obj[last] = val
	return nil
}

// parseLimitFlags turns --limit lever=value flags into the request's limits
// object. Lever names are checked here. Values are checked by the server,
// which knows the command's maxima.
func parseLimitFlags(args []string) (*api.LimitsOverride, error) {
	if len(args) == 0 {
		return nil, nil
	}
	m := map[string]any{}
	for _, a := range args {
		lever, value, _ := strings.Cut(a, "=") // no "=": value is ""
		if lever == "" || value == "" {
			return nil, fmt.Errorf("--limit %q: want lever=value, e.g. max_retry=0 or active_timeout=2h", a)
		}
		if lever == limits.FieldMaxRetry {
			n, err := strconv.Atoi(value)
			if err != nil {
				return nil, fmt.Errorf("--limit %s: want a whole number, got %q", lever, value)
			}
			m[lever] = n
			continue
		}
		m[lever] = value
	}
	raw, _ := json.Marshal(m) // strings and ints: cannot fail
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var o api.LimitsOverride
	if err := dec.Decode(&o); err != nil {
		return nil, fmt.Errorf("--limit: %w (levers: max_retry, retry_backoff, retry_backoff_max, pending_timeout, active_timeout, ttl_succeeded, ttl_failed)", err)
	}
	return &o, nil
}
