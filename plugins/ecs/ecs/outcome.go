package ecs

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Outcomes of a task, as stored in the handle.
const (
	outcomeSucceeded = "succeeded"
	outcomeFailed    = "failed"
	outcomeInfra     = "infra" // stopped by the infrastructure: relaunched on its own budget
)

// stoppedFirst are Task.stopCode values that say a request to stop the task
// came before its work ended: StopTask's UserInitiated, a service
// scheduler's ServiceSchedulerInitiated.
var stoppedFirst = map[string]bool{"UserInitiated": true, "ServiceSchedulerInitiated": true}

// infraStopCodes are Task.stopCode values that mean the infrastructure, not
// the work, stopped the task (ECS API reference, Task: stopCode; "Amazon
// ECS stopped task error codes" in the developer guide): a Spot
// reclaim, an instance terminating, a host found unhealthy.
var infraStopCodes = map[string]bool{
	"SpotInterruption":     true,
	"TerminationNotice":    true,
	"InfrastructureHealth": true,
}

const (
	statusStopped        = "STOPPED"
	statusDeprovisioning = "DEPROVISIONING"
	stopCodeFTS          = "TaskFailedToStart"
)

// ended reports whether a described task's outcome can be read: it is
// STOPPED, or DEPROVISIONING with every container stopped. The task
// lifecycle page of the ECS developer guide: DEPROVISIONING is "after the
// task has stopped but before the task transitions to the STOPPED state"
// (the awsvpc network interface being detached and deleted, which can take
// a while), so the containers' exit codes are final by then, and the job
// need not wait for the interface.
// https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-lifecycle-explanation.html
func ended(lastStatus string, containerStatuses []string) bool {
	switch lastStatus {
	case statusStopped:
		return true
	case statusDeprovisioning:
		return !slices.ContainsFunc(containerStatuses, func(s string) bool { return s != statusStopped })
	}
	return false
}

// containerResult is what DescribeTasks says about one container.
type containerResult struct {
	Name     string
	ExitCode *int32
	Reason   string
}

// stoppedTask is the part of a stopped task its outcome depends on.
type stoppedTask struct {
	StopCode      string
	StoppedReason string
	Containers    []containerResult
}

// evaluate decides a stopped task's outcome. essential maps container names
// to the task definition's essential flag. A container missing from it counts
// as essential (the ECS default). A task succeeds only when every essential
// container exited 0. A missing exit code is not success.
func evaluate(t stoppedTask, essential map[string]bool) (outcome, reason string) {
	if t.StopCode == stopCodeFTS {
		if transientStartFailure(t.StoppedReason) {
			// Nothing of the work ran, and the cause passes on its own:
			// relaunched on the infrastructure's budget, not max_fail_count.
			return outcomeInfra, "failed to start, transiently: " + t.StoppedReason
		}
		return outcomeFailed, "failed to start: " + orUnknown(t.StoppedReason)
	}
	if infraStopCodes[t.StopCode] {
		// The stop code records what stopped the task first: a task whose
		// essential container had exited on its own stops with
		// EssentialContainerExited. So the infrastructure's stop came
		// before the work ended, and ECS stops a task with SIGTERM
		// (StopTask: "the equivalent of docker stop"). A program that
		// handles it by exiting 0, as the Fargate Spot two-minute warning
		// asks, was cut short all the same: never a success.
		r := t.StopCode + ": " + orUnknown(t.StoppedReason)
		if out, _ := evaluate(stoppedTask{Containers: t.Containers}, essential); out == outcomeSucceeded {
			r += " (its containers exited 0 after the stop began: the work was cut short)"
		}
		return outcomeInfra, r
	}
	problems := essentialProblems(t.Containers, essential)
	if len(problems) == 0 && stoppedFirst[t.StopCode] {
		// Someone's StopTask (or a service's scheduler) came before the
		// work ended, as the infrastructure's does above: an exit 0 answers
		// the SIGTERM. A failed launch, not a success.
		problems = append(problems, t.StopCode+" stopped the task before it ended (its containers exited 0 after the stop began: the work was cut short)")
	}
	if len(problems) == 0 {
		return outcomeSucceeded, ""
	}
	sort.Strings(problems)
	r := strings.Join(problems, "; ")
	if t.StoppedReason != "" {
		r += "; stopped: " + t.StoppedReason
	}
	return outcomeFailed, r
}

// startFailureNotTransient are words of a TaskFailedToStart reason that say
// the cause is the job's own and will not pass: no such image or tag, no
// permission, a bad reference. They win over the transient words, which a
// message may carry too ("retried 5 time(s)").
var startFailureNotTransient = []string{
	"not found", "manifest unknown", "accessdenied", "access denied", "not authorized", "unauthorized",
	"invalid reference format", "no such", "denied:",
}

// startFailureTransient are words of a TaskFailedToStart reason whose cause
// passes on its own, from the developer guide's "CannotPullContainer task
// errors" and "ResourceInitializationError" pages: a registry's pull rate
// limit (toomanyrequests, 429), a network timeout or reset reaching the
// registry, Secrets Manager or SSM, throttling, and the ENI that took too
// long to attach.
var startFailureTransient = []string{
	"toomanyrequests", "429 too many requests", "i/o timeout", "context deadline exceeded", "tls handshake timeout",
	"connection reset by peer", "send request failed", "throttlingexception", "throttling: rate exceeded",
	"timeout waiting for network interface", "requestlimitexceeded", "503 service unavailable",
}

// transientStartFailure reports whether a TaskFailedToStart reason has a
// cause that passes on its own (startFailureTransient) and none that will
// not (startFailureNotTransient). An unknown reason is not transient: it
// counts against max_fail_count as before.
func transientStartFailure(reason string) bool {
	r := strings.ToLower(reason)
	in := func(w string) bool { return strings.Contains(r, w) }
	return !slices.ContainsFunc(startFailureNotTransient, in) && slices.ContainsFunc(startFailureTransient, in)
}

// essentialProblems says what is wrong with the essential containers'
// exits. It is nothing when every one exited 0.
func essentialProblems(containers []containerResult, essential map[string]bool) []string {
	var problems []string
	checked := 0
	for _, c := range containers {
		if ess, ok := essential[c.Name]; ok && !ess {
			continue
		}
		checked++
		if p := exitProblem(c); p != "" {
			problems = append(problems, p)
		}
	}
	if checked == 0 {
		problems = append(problems, "no essential container reported an exit code")
	}
	return problems
}

// exitProblem says what is wrong with a container's exit. That is no exit code,
// or one other than 0. It is "" for an exit with code 0.
func exitProblem(c containerResult) string {
	var msg string
	switch {
	case c.ExitCode == nil:
		msg = fmt.Sprintf("container %s has no exit code", c.Name)
	case *c.ExitCode != 0:
		msg = fmt.Sprintf("container %s exited with code %d", c.Name, *c.ExitCode)
	default:
		return ""
	}
	return msg + noteSuffix(c.Reason)
}

func orUnknown(s string) string { return cmp.Or(s, "no reason given") }
