package ecs

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// launchKind says why a task index is launched.
type launchKind int

const (
	firstLaunch    launchKind = iota // never launched in this attempt of the job
	recordedLaunch                   // a first launch whose counts and launch time are already checkpointed (Execute records all at once)
	unsentLaunch                     // a recorded first launch whose RunTask was never sent (past the handle's frontier): sent now
	relaunchFailed                   // its last launch failed: counts against max_fail_count
	relaunchInfra                    // the infrastructure stopped it: counts against max_infra_relaunches
	reissue                          // the current launch again, same client token (its answer was lost)
)

const (
	launchBackoffMin = 2 * time.Second
	launchBackoffMax = time.Minute
	// eagerARNTasks: jobs of up to this many tasks checkpoint each task's
	// ARN as soon as RunTask answers, so a Cleanup right after a launch
	// stops the task by ARN. Larger jobs record ARNs with the coalesced
	// checkpoints (a 1,000-task job would otherwise write its handle 1,000
	// times while launching). A Cleanup within checkpointEvery of a launch
	// then finds that task by startedBy, which ECS's eventual consistency
	// can delay.
	eagerARNTasks = 16
)

// launch starts task index i. A new launch (any kind but reissue) records
// its counts and first client token in the handle before RunTask, so a
// resume after a crash at any point reissues this very launch instead of
// starting another. reissue repeats it with the same token, which ECS
// answers with the task that launch started if it got through.
//
// RunTask refusals that pass with time (capacity, EC2's request limit,
// throttling, a quota; see classifyRunTaskError and classifyFailure), and
// refusals of reasons the plugin does not know, are tried again
// with a backoff for up to launch_retry_timeout without using any budget.
// Each try launched nothing, so it gets a new client token. A 5xx or a lost
// answer may have launched the task, so it is tried again with the same
// token.
func (r *run) launch(ctx context.Context, i int, kind launchKind) error {
	l := r.beginLaunch(i, kind)
	t := l.t
	giveUp := time.Now().Add(r.cfg.LaunchRetryTimeout)
	backoff := launchBackoffMin
	recorded := kind == recordedLaunch
	for {
		// The launch's counts and time are durable before its RunTask, so a
		// resume after a crash anywhere from here reissues this launch (same
		// client token) instead of starting another. What RunTask answers
		// need not be. A resume that does not know the ARN reissues the
		// token and gets the same task back (see eagerARNTasks). A launch
		// Execute recorded is checkpointed again only when it passes the
		// handle's frontier.
		if !recorded || r.pastFrontier(i) {
			r.raiseFrontier(i)
			if !l.sameToken {
				t.LaunchedAt = time.Now().UnixMilli()
			}
			if err := r.checkpoint(ctx); err != nil {
				return err
			}
		}
		recorded = false
		if done, err := r.tryLaunch(ctx, l); done {
			return err
		}
		if time.Now().Add(backoff).After(giveUp) {
			return r.gaveUp(l)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		r.stderrf("task %d: %s; trying again in %s", i, l.again, wait.Round(100*time.Millisecond))
		if !sleepCtx(ctx, wait) {
			return plugin.WithClass(plugin.Retriable, fmt.Errorf("ecs: launching task %d: %w", i, ctx.Err()))
		}
		backoff = min(backoff*2, launchBackoffMax)
	}
}

// pastFrontier reports whether Execute's launch pass reaches task index i
// beyond what the stored handle allows for (Handle.Unsent): its RunTask
// must wait for a checkpoint that moves the frontier on.
func (r *run) pastFrontier(i int) bool {
	return r.h.Unsent > 0 && i >= r.storedUnsent
}

// raiseFrontier moves the handle's frontier past task index i, far enough
// ahead that the coalesced checkpoints keep it ahead of the launches:
// about two checkpoint intervals of RunTask calls at the process's rate.
func (r *run) raiseFrontier(i int) {
	if r.h.Unsent == 0 {
		return // unknown: every index may have been sent
	}
	step := max(16, int(float64(r.cl.limits[apiRunTask].Limit())*2*checkpointEvery.Seconds()))
	to := max(r.h.Unsent, min(len(r.h.Tasks), i+1+step))
	// The indexes it passes may be sent from now on, no earlier: their
	// launch time is now (stopped_task_retention counts from it).
	now := time.Now().UnixMilli()
	for j := r.h.Unsent; j < to; j++ {
		r.h.Tasks[j].LaunchedAt = now
	}
	r.h.Unsent = to
}

// launchTries is one launch of a task index across its RunTask tries.
type launchTries struct {
	i         int
	t         *TaskState
	token     string // the client token of the current try
	sameToken bool   // the next try repeats the current client token
	again     string // why the current try is made again
}

// retryNew makes the try again with a new client token. RunTask refused it
// and nothing was launched.
func (l *launchTries) retryNew(why string) {
	l.again = why
	l.t.Try++
	l.sameToken = false
}

// retrySame makes the try again with the same client token. It may have
// launched the task, which the same token returns if so.
func (l *launchTries) retrySame(why string) {
	l.again = why
	l.sameToken = true
}

// beginLaunch counts a new launch of task index i (any kind but reissue,
// recordedLaunch and unsentLaunch, whose counts are recorded) and notes when
// the job started.
func (r *run) beginLaunch(i int, kind launchKind) *launchTries {
	t := &r.h.Tasks[i]
	if kind != reissue && kind != recordedLaunch && kind != unsentLaunch {
		t.startLaunch(kind)
	}
	r.h.StartedAt = cmp.Or(r.h.StartedAt, time.Now().Unix())
	return &launchTries{i: i, t: t, sameToken: kind == reissue && t.LaunchedAt > 0}
}

// startLaunch counts a launch of the task and clears what the last launch
// left, keeping the IDs of earlier launches.
func (t *TaskState) startLaunch(kind launchKind) {
	if t.ID != "" {
		t.Prev = append(t.Prev, t.ID)
	}
	attempts, infra := t.Attempts, t.Infra
	if kind == relaunchInfra {
		infra++
	} else {
		attempts++
	}
	*t = TaskState{Attempts: attempts, Infra: infra, Prev: t.Prev}
}

// tryLaunch makes one RunTask call for the launch. It reports done with the
// launch's error (nil when the task started), or not done with l.again set.
func (r *run) tryLaunch(ctx context.Context, l *launchTries) (bool, error) {
	i, t := l.i, l.t
	l.token = r.clientToken(i, t)
	r.stderrf("task %d launch %d of %d (relaunches %d): startedBy %s, clientToken %s", i, t.Attempts, r.cfg.MaxFailCount, t.Infra, StartedBy(r.job.ID, i), l.token)
	if err := r.cl.wait(ctx, apiRunTask); err != nil {
		return true, err
	}
	out, err := r.cl.ecs.RunTask(ctx, r.runTaskInput(i))
	switch {
	case err != nil:
		return r.launchRefused(ctx, l, err)
	case len(out.Tasks) == 0:
		return r.launchFailed(ctx, l, out.Failures)
	}
	return true, r.launched(ctx, l, out.Tasks[0])
}

// launchRefused handles a RunTask call that returned an error, by what
// classifyRunTaskError makes of it.
func (r *run) launchRefused(ctx context.Context, l *launchTries, err error) (bool, error) {
	i := l.i
	if ctx.Err() != nil {
		return true, plugin.WithClass(plugin.Retriable, fmt.Errorf("ecs: launching task %d: %w", i, ctx.Err()))
	}
	switch runTaskErrorKind(err) {
	case refusalUnknownOutcome:
		// The client token already started a task, with other parameters
		// (the config changed between agents): not ours to judge, nor to
		// start again.
		return true, plugin.Errorf(plugin.OutcomeUnknown, "ecs: launching task %d of job %s again with client token %s: %v", i, r.job.ID, l.token, err)
	case refusalPasses:
		l.retryNew("RunTask refused: " + err.Error())
		return false, nil
	case refusalUnknown:
		l.retryNew("RunTask refused for a reason the plugin does not know (taken to pass): " + err.Error())
		return false, nil
	case refusalWrongRequest:
		l.t.Outcome, l.t.Reason = outcomeFailed, "RunTask refused: "+err.Error()
		if cerr := r.checkpoint(ctx); cerr != nil {
			return true, cerr
		}
		return true, plugin.Errorf(plugin.Permanent, "ecs: launching task %d of job %s: %v", i, r.job.ID, err)
	}
	// A 5xx or a lost answer. The task may exist. The same token returns it
	// if so.
	l.retrySame("RunTask failed (it may have launched; trying again with the same client token): " + err.Error())
	return false, nil
}

// launchFailed handles a RunTask answer without a task, by what
// classifyFailure makes of its failures: the gravest decides.
func (r *run) launchFailed(ctx context.Context, l *launchTries, failures []types.Failure) (bool, error) {
	i, t := l.i, l.t
	var reasons []string
	kind := refusalUnknown // no task and no failure: nothing launched, for no reason given
	if len(failures) > 0 {
		kind = refusalPasses
	}
	for _, f := range failures {
		reason := aws.ToString(f.Reason)
		if reason == "MISSING" {
			// ECS remembers the token but has forgotten its task. It ran
			// and stopped while nobody watched, with an unknown outcome.
			return true, plugin.Errorf(plugin.OutcomeUnknown,
				"ecs: task %d of job %s: launch %d started %s, which ECS no longer knows; its outcome is unknown",
				i, r.job.ID, t.Attempts, aws.ToString(f.Arn))
		}
		kind = graver(kind, classifyFailure(reason))
		reasons = append(reasons, strings.TrimSpace(reason+" "+aws.ToString(f.Detail)))
	}
	if len(reasons) == 0 {
		reasons = append(reasons, "no task and no failure returned")
	}
	switch kind {
	case refusalPasses:
		l.retryNew("no capacity: " + strings.Join(reasons, "; "))
		return false, nil
	case refusalUnknown:
		l.retryNew("RunTask failed for a reason the plugin does not know (taken to pass): " + strings.Join(reasons, "; "))
		return false, nil
	}
	t.Outcome, t.Reason = outcomeFailed, "RunTask failed: "+strings.Join(reasons, "; ")
	r.stderrf("task %d: %s", i, t.Reason)
	r.dirty = true
	return true, r.flush(ctx, false)
}

// graver is the graver of two refusals of one answer: a failed launch over
// an unknown reason over one that passes.
func graver(a, b refusal) refusal {
	rank := map[refusal]int{refusalPasses: 0, refusalUnknown: 1, refusalFailedLaunch: 2}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// launched records the task RunTask started and starts following it.
func (r *run) launched(ctx context.Context, l *launchTries, task types.Task) error {
	r.h.setARN(l.t, aws.ToString(task.TaskArn))
	switch {
	case task.CreatedAt != nil:
		// When ECS created it: a reissued token may have started it only
		// now, and the consistency window counts from then.
		l.t.LaunchedAt = task.CreatedAt.UnixMilli()
	case !l.sameToken || l.t.LaunchedAt == 0:
		l.t.LaunchedAt = time.Now().UnixMilli()
	}
	r.raiseFrontier(l.i) // goes out with the coalesced checkpoint
	r.dirty = true
	if err := r.flush(ctx, len(r.h.Tasks) <= eagerARNTasks); err != nil {
		return err
	}
	r.track(l.i)
	r.stderrf("task %d is %s", l.i, aws.ToString(task.TaskArn))
	return nil
}

// gaveUp is the error of a launch that ran out of launch_retry_timeout.
func (r *run) gaveUp(l *launchTries) error {
	msg := fmt.Sprintf("ecs: launching task %d of job %s: gave up after %s: %s", l.i, r.job.ID, r.cfg.LaunchRetryTimeout, l.again)
	if l.sameToken {
		// The last try may have launched it. A retry of the job would run
		// beside it. stopOnError stops what is known. A task behind a lost
		// answer is stopped by the job's Cleanup, which lists by startedBy.
		return plugin.Errorf(plugin.OutcomeUnknown, "%s", msg)
	}
	return plugin.Errorf(plugin.Retriable, "%s", msg)
}

// sleepCtx waits d or until ctx ends. It reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
