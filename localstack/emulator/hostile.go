package emulator

import (
	"encoding/json"
	"time"
)

// Failure reasons a capacity error picks from. RESOURCE:CPU, RESOURCE:MEMORY
// and AGENT are in the ECS "API failure reasons" page. The Fargate capacity
// text is the one the re:Post article "ecs-fargate-runtask-capacity"
// quotes; the Fargate vCPU quota's is in the developer guide's "Service
// event messages" (the RunTask response's failures point to that page).
const (
	ReasonResourceCPU      = "RESOURCE:CPU"
	ReasonResourceMemory   = "RESOURCE:MEMORY"
	ReasonAgent            = "AGENT"
	ReasonFargateCapacity  = "Capacity is unavailable at this time. Please try again later or in a different availability zone"
	ReasonFargateVCPUQuota = "You’ve reached the limit on the number of vCPUs you can run concurrently"
)

// Stopped reasons of tasks that fail to start (stopCode TaskFailedToStart),
// in the words of the developer guide's "Amazon ECS stopped task error
// messages" pages (CannotPullContainer errors, ResourceInitializationError).
// The first two are transient (a registry's pull rate limit, a network
// timeout fetching a secret), the last two are not (no such image, no
// permission to read a secret).
const (
	FailToStartPullRateLimit = "CannotPullContainerError: pull image manifest has been retried 5 time(s): failed to resolve ref docker.io/library/busybox:latest: unexpected status from HEAD request: 429 Too Many Requests: toomanyrequests: You have reached your pull rate limit."
	FailToStartSecretTimeout = "ResourceInitializationError: unable to pull secrets or registry auth: execution resource retrieval failed: unable to retrieve secret from asm: service call has been retried 5 time(s): RequestError: send request failed caused by: Post \"https://secretsmanager.eu-west-1.amazonaws.com/\": dial tcp 10.0.0.1:443: i/o timeout"
	FailToStartNoImage       = "CannotPullContainerError: pull image manifest has been retried 5 time(s): failed to resolve ref docker.io/library/no-such-image:latest: docker.io/library/no-such-image:latest: not found"
	FailToStartSecretDenied  = "ResourceInitializationError: unable to pull secrets or registry auth: execution resource retrieval failed: unable to retrieve secret from asm: service call has been retried 1 time(s): failed to fetch secret arn:aws:secretsmanager:eu-west-1:123456789012:secret:db from secrets manager: AccessDeniedException: User is not authorized to perform secretsmanager:GetSecretValue"
	// failToStartDefault is the reason when none is configured.
	failToStartDefault = "CannotPullContainerError: injected failure to start"
)

// AllCapacityReasons lists every capacity failure reason the emulator knows.
func AllCapacityReasons() []string {
	return []string{ReasonResourceCPU, ReasonResourceMemory, ReasonAgent, ReasonFargateCapacity, ReasonFargateVCPUQuota}
}

const (
	// provisioningLimitText answers a RunTask that hit the "Tasks in the
	// PROVISIONING state per cluster" quota. The RunTask API reference
	// documents the ClientException and its cause but not its message. This
	// text is the one users report (e.g. DIAGNijmegen/rse-grand-challenge#2013).
	provisioningLimitText = "Tasks provisioning capacity limit exceeded."
	// ec2LimitFormat is an EC2 RequestLimitExceeded wrapped by RunTask, as
	// reported in dask/dask-cloudprovider#56.
	ec2LimitFormat = "Error retrieving security group information for [%s]: Request limit exceeded. (ErrorCode: RequestLimitExceeded)"
	// fallbackSecurityGroup names a security group when the request has none.
	fallbackSecurityGroup = "sg-0a1b2c3d4e5f67890"

	defaultInfraStopDelay = 10 * time.Second

	// spotReason is the stoppedReason of a Fargate Spot interruption.
	spotReason = "Your Spot Task was interrupted."
)

// upTo draws a duration uniformly in [0, d]. e.mu must be held.
func (e *Emulator) upTo(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(e.rng.Int64N(int64(d) + 1))
}

// transientRunTaskError is one of the two RunTask errors that launch
// nothing and go away on retry. e.mu must be held.
func (e *Emulator) transientRunTaskError(netConf json.RawMessage) *apiError {
	if e.rng.IntN(2) == 0 {
		return clientErr("%s", provisioningLimitText)
	}
	sg := fallbackSecurityGroup
	var nc struct {
		AwsvpcConfiguration struct {
			SecurityGroups []string `json:"securityGroups"`
		} `json:"awsvpcConfiguration"`
	}
	if json.Unmarshal(netConf, &nc) == nil && len(nc.AwsvpcConfiguration.SecurityGroups) > 0 {
		sg = nc.AwsvpcConfiguration.SecurityGroups[0]
	}
	return invalidParam(ec2LimitFormat, sg)
}

// capacityFailure is a failures[] entry for a slot that found no capacity.
// e.mu must be held. EC2 reasons name a container instance, as in ECS.
func (e *Emulator) capacityFailure(clusterName string) failure {
	reasons := capacityReasons(e.faults.CapacityReasons)
	f := failure{Reason: reasons[e.rng.IntN(len(reasons))]}
	if !fargateReason(f.Reason) {
		f.Arn = "arn:aws:ecs:" + region + ":" + account + ":container-instance/" + clusterName + "/" + newID()
	}
	return f
}

// fargateReason reports the reasons of Fargate, which has no container
// instances to name.
func fargateReason(r string) bool { return r == ReasonFargateCapacity || r == ReasonFargateVCPUQuota }

// capacityReasons is the reasons a capacity error picks from: rs, or
// RESOURCE:CPU alone when rs is empty.
func capacityReasons(rs []string) []string {
	if len(rs) == 0 {
		return []string{ReasonResourceCPU}
	}
	return rs
}

// infraStop is an infrastructure stop planned for a task.
type infraStop struct {
	after     time.Duration
	code      string
	reason    string
	exitCodes bool // SIGTERM and exit codes, or the host vanished
}

// pickFailToStartReason picks a failing start's stopped reason. e.mu must
// be held.
func (e *Emulator) pickFailToStartReason() string {
	if rs := e.faults.FailToStartReasons; len(rs) > 0 {
		return rs[e.rng.IntN(len(rs))]
	}
	return failToStartDefault
}

// pickInfraStop plans an infrastructure stop. e.mu must be held. The stop
// codes are the TaskStopCode values that mean infrastructure. The reasons
// follow what ECS reports (README.md says where each comes from).
func (e *Emulator) pickInfraStop() *infraStop {
	d := positiveOr(e.faults.InfraStopDelay, defaultInfraStopDelay)
	s := &infraStop{after: e.upTo(d), exitCodes: e.faults.InfraStopGraceful || e.rng.IntN(2) == 0}
	switch e.rng.IntN(3) {
	case 0:
		s.code, s.reason = "SpotInterruption", spotReason
	case 1:
		// The ECS guide's Fargate Spot event example pairs the Spot text
		// with TerminationNotice, so that code carries either text.
		s.code, s.reason = "TerminationNotice", "Host EC2 (instance i-"+newID()[:17]+") terminated."
		if e.rng.IntN(2) == 0 {
			s.reason = spotReason
		}
	default:
		// No AWS text is documented for this code. The reason is the
		// emulator's.
		s.code, s.reason = "InfrastructureHealth", "Task stopped because its infrastructure became unhealthy."
	}
	return s
}

// beginInfraStop records an infrastructure stop unless the task is already
// stopping. It reports whether the stop applies.
func (e *Emulator) beginInfraStop(t *task) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t.stopCode != "" {
		return false
	}
	t.stopCode, t.stoppedReason = t.infra.code, t.infra.reason
	t.desiredStatus, t.stoppingAt = "STOPPED", time.Now()
	t.hostGone = !t.infra.exitCodes
	t.version++
	e.log.Info("infrastructure stopping task", "task", t.id, "stopCode", t.stopCode, "exitCodes", t.infra.exitCodes)
	return true
}
