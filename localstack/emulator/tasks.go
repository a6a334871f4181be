package emulator

import (
	"bufio"
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type failure struct {
	Arn    string `json:"arn,omitempty"`
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
}

type tokenEntry struct {
	hash     string
	taskArns []string
	at       time.Time
}

type container struct {
	name       string
	image      string
	essential  bool
	argv       []string
	env        []string
	dir        string
	logGroup   string
	logStream  string
	lastStatus string
	exitCode   *int
	reason     string
	pid        int
	// synthetic containers run no process. Signals reach them on sig.
	synthetic bool
	vars      map[string]string
	sig       chan syscall.Signal
}

type task struct {
	id, arn    string
	cluster    string
	clusterArn string
	seq        uint64
	td         *taskDef
	startedBy  string
	group      string
	launchType string
	// capacityProvider is the provider of the request's strategy that ran it.
	capacityProvider string
	tags             []tag
	overrides        json.RawMessage
	cpu, memory      string
	lastStatus       string
	desiredStatus    string
	createdAt        time.Time
	pullStartedAt    time.Time
	pullStoppedAt    time.Time
	startedAt        time.Time
	stoppingAt       time.Time
	// executionStoppedAt is when every container had exited (DEPROVISIONING).
	executionStoppedAt time.Time
	stoppedAt          time.Time
	stopCode           string
	stoppedReason      string
	version            int64
	containers         []*container
	failStart          bool
	failReason         string // its stopped reason, when failStart
	stopReq            chan struct{}
	// visibleAt is when DescribeTasks and ListTasks start seeing the task.
	visibleAt time.Time
	// infra, when set, stops the task that long after it is RUNNING.
	infra *infraStop
	// hostGone means the containers vanished with their host, so none gets an
	// exit code.
	hostGone bool
}

// expired reports whether a stopped task is past retention. e.mu held.
func (e *Emulator) expired(t *task, now time.Time) bool {
	return t.lastStatus == "STOPPED" && now.Sub(t.stoppedAt) > e.opts.StoppedRetention
}

type taskOut struct {
	TaskArn              string          `json:"taskArn"`
	ClusterArn           string          `json:"clusterArn"`
	TaskDefinitionArn    string          `json:"taskDefinitionArn"`
	Containers           []containerOut  `json:"containers"`
	LastStatus           string          `json:"lastStatus"`
	DesiredStatus        string          `json:"desiredStatus"`
	CreatedAt            *float64        `json:"createdAt,omitempty"`
	PullStartedAt        *float64        `json:"pullStartedAt,omitempty"`
	PullStoppedAt        *float64        `json:"pullStoppedAt,omitempty"`
	StartedAt            *float64        `json:"startedAt,omitempty"`
	StoppingAt           *float64        `json:"stoppingAt,omitempty"`
	StoppedAt            *float64        `json:"stoppedAt,omitempty"`
	ExecutionStoppedAt   *float64        `json:"executionStoppedAt,omitempty"`
	StopCode             string          `json:"stopCode,omitempty"`
	StoppedReason        string          `json:"stoppedReason,omitempty"`
	StartedBy            string          `json:"startedBy,omitempty"`
	Group                string          `json:"group,omitempty"`
	LaunchType           string          `json:"launchType,omitempty"`
	CapacityProviderName string          `json:"capacityProviderName,omitempty"`
	Cpu                  string          `json:"cpu,omitempty"`
	Memory               string          `json:"memory,omitempty"`
	Version              int64           `json:"version"`
	Tags                 []tag           `json:"tags,omitempty"`
	Overrides            json.RawMessage `json:"overrides,omitempty"`
	AvailabilityZone     string          `json:"availabilityZone"`
	HealthStatus         string          `json:"healthStatus"`
	EnableExecuteCommand bool            `json:"enableExecuteCommand"`
}

type containerOut struct {
	ContainerArn string `json:"containerArn"`
	TaskArn      string `json:"taskArn"`
	Name         string `json:"name"`
	Image        string `json:"image"`
	LastStatus   string `json:"lastStatus"`
	ExitCode     *int   `json:"exitCode,omitempty"`
	Reason       string `json:"reason,omitempty"`
	HealthStatus string `json:"healthStatus"`
	RuntimeID    string `json:"runtimeId,omitempty"`
}

// render snapshots a task for a response. e.mu held. It renders tags only
// when asked, as in ECS.
func (t *task) render(withTags bool) taskOut {
	o := taskOut{
		TaskArn: t.arn, ClusterArn: t.clusterArn, TaskDefinitionArn: t.td.arn,
		LastStatus: t.lastStatus, DesiredStatus: t.desiredStatus,
		CreatedAt: epoch(t.createdAt), PullStartedAt: epoch(t.pullStartedAt), PullStoppedAt: epoch(t.pullStoppedAt),
		StartedAt: epoch(t.startedAt), StoppingAt: epoch(t.stoppingAt), StoppedAt: epoch(t.stoppedAt),
		ExecutionStoppedAt: epoch(t.executionStoppedAt),
		StopCode:           t.stopCode, StoppedReason: t.stoppedReason,
		StartedBy: t.startedBy, Group: t.group, LaunchType: t.launchType, CapacityProviderName: t.capacityProvider,
		Cpu: t.cpu, Memory: t.memory, Version: t.version, Overrides: t.overrides,
		AvailabilityZone: region + "a", HealthStatus: "UNKNOWN",
	}
	if withTags {
		o.Tags = append([]tag{}, t.tags...)
	}
	o.Containers = make([]containerOut, 0, len(t.containers))
	for _, c := range t.containers {
		co := containerOut{
			ContainerArn: "arn:aws:ecs:" + region + ":" + account + ":container/" + t.cluster + "/" + t.id + "/" + c.name,
			TaskArn:      t.arn, Name: c.name, Image: c.image, LastStatus: c.lastStatus,
			Reason: c.reason, HealthStatus: "UNKNOWN",
		}
		// An exit code never changes once set, so the pointer is shared.
		co.ExitCode = c.exitCode
		if c.pid != 0 {
			co.RuntimeID = t.id + "-" + strconv.Itoa(c.pid)
		}
		o.Containers = append(o.Containers, co)
	}
	return o
}

type containerOverride struct {
	Name        string   `json:"name"`
	Command     []string `json:"command,omitempty"`
	Environment []kv     `json:"environment,omitempty"`
}

type runTaskReq struct {
	Cluster                  string          `json:"cluster,omitempty"`
	TaskDefinition           string          `json:"taskDefinition,omitempty"`
	Count                    *int            `json:"count,omitempty"`
	StartedBy                string          `json:"startedBy,omitempty"`
	Group                    string          `json:"group,omitempty"`
	LaunchType               string          `json:"launchType,omitempty"`
	PlatformVersion          string          `json:"platformVersion,omitempty"`
	NetworkConfiguration     json.RawMessage `json:"networkConfiguration,omitempty"`
	CapacityProviderStrategy json.RawMessage `json:"capacityProviderStrategy,omitempty"`
	Overrides                json.RawMessage `json:"overrides,omitempty"`
	Tags                     []tag           `json:"tags,omitempty"`
	PropagateTags            string          `json:"propagateTags,omitempty"`
	EnableECSManagedTags     bool            `json:"enableECSManagedTags,omitempty"`
	EnableExecuteCommand     bool            `json:"enableExecuteCommand,omitempty"`
	ReferenceID              string          `json:"referenceId,omitempty"`
	PlacementConstraints     json.RawMessage `json:"placementConstraints,omitempty"`
	PlacementStrategy        json.RawMessage `json:"placementStrategy,omitempty"`
	ClientToken              string          `json:"clientToken,omitempty"`
}

type overridesReq struct {
	ContainerOverrides []containerOverride `json:"containerOverrides"`
	Cpu                string              `json:"cpu"`
	Memory             string              `json:"memory"`
}

// startedByChars are the characters ECS allows in startedBy.
const startedByChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_/"

// maxStartedBy is the longest startedBy RunTask takes. The RunTask
// reference (and aws-sdk-go-v2's RunTaskInput.StartedBy) says "Up to 128
// letters (uppercase and lowercase), numbers, hyphens (-), forward slash
// (/), and underscores (_)". Older references said 36.
const maxStartedBy = 128

func validStartedBy(s string) bool {
	return len(s) <= maxStartedBy && strings.Trim(s, startedByChars) == ""
}

// validClientToken wants at most 64 printable ASCII characters. A byte
// outside ASCII makes a rune above 126 too.
func validClientToken(s string) bool {
	return len(s) <= 64 && !strings.ContainsFunc(s, func(r rune) bool { return !inRange(r, 33, 126) })
}

func (e *Emulator) runTaskOp(req runTaskReq) (any, error) {
	count, ov, err := req.check()
	if err != nil {
		return nil, err
	}
	hash := req.hash()

	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.closing:
		// No task goroutines may start once Close waits for them.
		return nil, &apiError{status: 500, typ: "ServerException", msg: "emulator is shutting down"}
	default:
	}
	c, err := e.lookupCluster(req.Cluster)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tokenKey := c.name + "\x00" + req.ClientToken
	if out, replayed, err := e.replayToken(tokenKey, hash, now); replayed {
		return out, err
	}
	td, overrideByName, err := e.launchable(req, ov)
	if err != nil {
		return nil, err
	}
	if e.chance(e.faults.RunTaskTransientRate) {
		return nil, e.transientRunTaskError(req.NetworkConfiguration)
	}

	tasks, failures, arns := e.launchTasks(c, td, req, ov, overrideByName, count, now)
	// Only a request that launched something claims its token, so a retry
	// after a capacity failure can still launch.
	if req.ClientToken != "" && len(arns) > 0 {
		e.tokens[tokenKey] = &tokenEntry{hash: hash, taskArns: arns, at: now}
	}
	return map[string]any{"tasks": tasks, "failures": failures}, nil
}

// launchTasks starts count tasks of the request, each unless the profile
// draws a capacity failure for it. e.mu must be held.
func (e *Emulator) launchTasks(c *cluster, td *taskDef, req runTaskReq, ov overridesReq, overrideByName map[string]containerOverride, count int, now time.Time) ([]taskOut, []failure, []string) {
	tasks := []taskOut{}
	failures := []failure{}
	var arns []string
	for range count {
		if e.chance(e.faults.CapacityErrorRate) {
			failures = append(failures, e.capacityFailure(c.name))
			continue
		}
		t := e.newTask(c, td, req, ov, overrideByName, now)
		e.tasks[t.id] = t
		e.launches[req.StartedBy]++
		arns = append(arns, t.arn)
		tasks = append(tasks, t.render(true))
		e.wg.Add(1)
		go e.runTask(t)
	}
	return tasks, failures, arns
}

// check validates what RunTask refuses without looking at the cluster or
// the task definition. It returns the task count and the decoded overrides.
func (req *runTaskReq) check() (int, overridesReq, error) {
	var ov overridesReq
	count, err := intParam(req.Count, 1, 10, "count")
	if err != nil {
		return 0, ov, err
	}
	switch {
	case req.TaskDefinition == "":
		return 0, ov, invalidParam("taskDefinition can not be blank.")
	case !validStartedBy(req.StartedBy):
		return 0, ov, invalidParam("startedBy must be at most 128 characters of letters, numbers, hyphens, underscores and forward slashes")
	case !validClientToken(req.ClientToken):
		return 0, ov, invalidParam("clientToken must be at most 64 ASCII characters in the range 33-126")
	}
	if err := cmp.Or(validateTags(req.Tags), checkLaunchType(req.LaunchType, req.CapacityProviderStrategy), checkStrategy(req.CapacityProviderStrategy)); err != nil {
		return 0, ov, err
	}
	if len(req.Overrides) > 0 {
		if err := json.Unmarshal(req.Overrides, &ov); err != nil {
			return 0, ov, invalidParam("overrides: %v", err)
		}
	}
	return count, ov, nil
}

// strategyItem is one entry of a RunTask capacityProviderStrategy.
type strategyItem struct {
	CapacityProvider string `json:"capacityProvider"`
	Weight           int    `json:"weight"`
	Base             int    `json:"base"`
}

// fargateProviders are the capacity providers of the Fargate launch type
// (CapacityProviderStrategyItem, ECS API reference); any other provider is
// an Auto Scaling group's, of the EC2 launch type.
var fargateProviders = map[string]bool{"FARGATE": true, "FARGATE_SPOT": true}

// launchOf is the launch type a task of the request runs with, and the
// capacity provider that ran it: the request's launchType (EC2 when it
// sets neither, the emulator's clusters having no default strategy), or
// the launch type of the strategy's provider. The provider is the first
// with a base, else the first of the highest weight.
func launchOf(req runTaskReq) (launchType, provider string) {
	var items []strategyItem
	if req.CapacityProviderStrategy == nil || json.Unmarshal(req.CapacityProviderStrategy, &items) != nil || len(items) == 0 {
		return cmp.Or(req.LaunchType, "EC2"), ""
	}
	pick := items[0]
	for _, it := range items {
		if pick.Base == 0 && (it.Base > 0 || it.Weight > pick.Weight) {
			pick = it
		}
	}
	if fargateProviders[pick.CapacityProvider] {
		return "FARGATE", pick.CapacityProvider
	}
	return "EC2", pick.CapacityProvider
}

// checkStrategy accepts a capacity provider strategy of 1 to 20 named
// providers (CapacityProviderStrategyItem: "can contain a maximum of 20"),
// weights 0-1000, bases 0-100000, a base on one provider at most.
func checkStrategy(raw json.RawMessage) error {
	if raw == nil {
		return nil
	}
	var items []strategyItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return invalidParam("capacityProviderStrategy: %v", err)
	}
	bases := 0
	for _, it := range items {
		switch {
		case it.CapacityProvider == "":
			return invalidParam("capacityProviderStrategy: capacityProvider can not be blank.")
		case !inRange(it.Weight, 0, 1000) || !inRange(it.Base, 0, 100000):
			return invalidParam("capacityProviderStrategy: weight must be 0-1000 and base 0-100000")
		case it.Base > 0:
			bases++
		}
	}
	if len(items) == 0 || len(items) > 20 || bases > 1 {
		return invalidParam("capacityProviderStrategy: want 1 to 20 providers, at most one with a base")
	}
	return nil
}

// checkLaunchType accepts a known launch type, or none, and not beside a
// capacity provider strategy.
func checkLaunchType(launchType string, capacityProviders json.RawMessage) error {
	if launchType != "" && capacityProviders != nil {
		return invalidParam("Specifying both a launchType and capacityProviderStrategy is not supported.")
	}
	switch launchType {
	case "", "EC2", "FARGATE", "EXTERNAL":
		return nil
	}
	return invalidParam("launchType %q is not valid", launchType)
}

// hash identifies the request's parameters, its client token aside, so a
// token reused with other parameters is told apart.
func (req *runTaskReq) hash() string {
	hashReq := *req
	hashReq.ClientToken = ""
	hb, _ := json.Marshal(hashReq)
	sum := sha256.Sum256(hb)
	return hex.EncodeToString(sum[:])
}

// replayToken answers a RunTask whose client token is known and fresh with
// the tasks that token launched. It reports false when the request is to
// launch as new. e.mu must be held. Only a request with a client token
// stores one, so a request without finds none.
func (e *Emulator) replayToken(tokenKey, hash string, now time.Time) (any, bool, error) {
	te, ok := e.tokens[tokenKey]
	if !ok || now.Sub(te.at) > clientTokenTTL {
		return nil, false, nil
	}
	if te.hash != hash {
		return nil, true, &apiError{status: 400, typ: "ConflictException",
			msg:   "The clientToken is already in use with a different RunTask request.",
			extra: map[string]any{"resourceIds": te.taskArns}}
	}
	tasks := []taskOut{}
	failures := []failure{}
	for _, arn := range te.taskArns {
		t, ok := e.liveTask(refID(arn), now)
		if !ok {
			failures = append(failures, failure{Arn: arn, Reason: "MISSING"})
			continue
		}
		tasks = append(tasks, t.render(true))
	}
	// No AWS document says what a replay returns once the token's
	// tasks are purged. "relaunch" assumes the token is forgotten.
	if len(tasks) > 0 || e.faults.TokenReplayAfterPurge != TokenReplayRelaunch {
		return map[string]any{"tasks": tasks, "failures": failures}, true, nil
	}
	delete(e.tokens, tokenKey)
	return nil, false, nil
}

// launchable finds the request's task definition and checks that it can be
// launched as asked. It returns the container overrides by container name.
// e.mu must be held.
func (e *Emulator) launchable(req runTaskReq, ov overridesReq) (*taskDef, map[string]containerOverride, error) {
	td, ok := e.lookupTaskDef(req.TaskDefinition)
	switch {
	case !ok:
		return nil, nil, clientErr("Unable to find task definition %q", req.TaskDefinition)
	case td.status != "ACTIVE":
		return nil, nil, clientErr("TaskDefinition is inactive")
	case td.networkMode == "awsvpc" && req.NetworkConfiguration == nil:
		return nil, nil, invalidParam("Network Configuration must be provided when networkMode 'awsvpc' is specified.")
	}
	overrideByName := map[string]containerOverride{}
	for _, o := range ov.ContainerOverrides {
		if !slices.ContainsFunc(td.containers, func(cd containerDef) bool { return cd.Name == o.Name }) {
			return nil, nil, invalidParam("Override for container named %s is not a container in the TaskDefinition.", o.Name)
		}
		overrideByName[o.Name] = o
	}
	return td, overrideByName, nil
}

// newTask makes one PROVISIONING task of the request, with the faults the
// emulator's profile draws for it. e.mu must be held.
func (e *Emulator) newTask(c *cluster, td *taskDef, req runTaskReq, ov overridesReq, overrideByName map[string]containerOverride, now time.Time) *task {
	tdCPU, _ := td.raw["cpu"].(string)
	tdMemory, _ := td.raw["memory"].(string)
	launchType, provider := launchOf(req)
	e.seq++
	id := newID()
	t := &task{
		id: id, arn: "arn:aws:ecs:" + region + ":" + account + ":task/" + c.name + "/" + id,
		cluster: c.name, clusterArn: c.arn, seq: e.seq, td: td,
		startedBy: req.StartedBy, group: cmp.Or(req.Group, "family:"+td.family), launchType: launchType, capacityProvider: provider,
		tags: append([]tag(nil), req.Tags...), overrides: req.Overrides,
		cpu: cmp.Or(ov.Cpu, tdCPU), memory: cmp.Or(ov.Memory, tdMemory),
		lastStatus: "PROVISIONING", desiredStatus: "RUNNING", createdAt: now, version: 1,
		failStart: e.chance(e.faults.FailToStartRate),
		stopReq:   make(chan struct{}, 1),
		visibleAt: now.Add(e.upTo(e.faults.ConsistencyWindow)),
	}
	if t.failStart {
		t.failReason = e.pickFailToStartReason()
	}
	if e.chance(e.faults.InfraStopRate) {
		t.infra = e.pickInfraStop()
	}
	for _, cd := range td.containers {
		t.containers = append(t.containers, buildContainer(cd, overrideByName[cd.Name], id))
	}
	return t
}

func buildContainer(cd containerDef, ov containerOverride, taskID string) *container {
	cmd := cd.Command
	if ov.Command != nil {
		cmd = ov.Command
	}
	argv := append(append([]string{}, cd.EntryPoint...), cmd...)
	env, vars := containerEnv(cd.Environment, ov.Environment)
	c := &container{name: cd.Name, image: cd.Image, essential: cd.essential(), argv: argv, env: env,
		dir: cd.WorkingDirectory, lastStatus: "PENDING"}
	if cd.Image == SyntheticImage {
		c.synthetic, c.vars, c.sig = true, vars, make(chan syscall.Signal, 2)
	}
	c.logGroup, c.logStream = awslogsStream(cd, taskID)
	return c
}

// containerEnv is a container's environment, the definition's with the
// override's on top, in the order the names first appear. It returns the
// variables as a map too.
func containerEnv(defined, overridden []kv) ([]string, map[string]string) {
	vars := map[string]string{}
	var order []string
	for _, v := range slices.Concat(defined, overridden) {
		if _, ok := vars[v.Name]; !ok {
			order = append(order, v.Name)
		}
		vars[v.Name] = v.Value
	}
	// Containers do not inherit the host environment. PATH and HOME keep
	// local commands runnable.
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, vars
}

// awslogsStream is the log group and stream of a container whose
// definition uses the awslogs driver with a group. It is empty otherwise.
func awslogsStream(cd containerDef, taskID string) (group, stream string) {
	lc := cd.LogConfiguration
	if lc == nil || lc.LogDriver != "awslogs" || lc.Options["awslogs-group"] == "" {
		return "", ""
	}
	if p := lc.Options["awslogs-stream-prefix"]; p != "" {
		return lc.Options["awslogs-group"], p + "/" + cd.Name + "/" + taskID
	}
	return lc.Options["awslogs-group"], taskID
}

type exitEvent struct {
	idx  int
	code int
}

// pause waits d. It returns false when a stop was requested or the emulator
// closes.
func (e *Emulator) pause(t *task, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-t.stopReq:
		return false
	case <-e.closing:
		return false
	}
}

func (e *Emulator) setStatus(t *task, f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f()
	t.version++
}

// finish stops the task: DEPROVISIONING once its containers have exited
// (their exit codes known), STOPPED after the deprovision delay (the
// network interface released). e.mu must not be held.
func (e *Emulator) finish(t *task, code, reason string) {
	e.setStatus(t, func() {
		now := time.Now()
		if t.stopCode == "" {
			t.stopCode, t.stoppedReason = code, reason
		}
		if t.stoppingAt.IsZero() {
			t.stoppingAt = now
		}
		t.desiredStatus, t.lastStatus, t.executionStoppedAt = "STOPPED", "DEPROVISIONING", now
		for _, c := range t.containers {
			c.lastStatus = "STOPPED"
		}
	})
	e.mu.Lock()
	delay := max(stepDelay, e.faults.DeprovisionDelay)
	e.mu.Unlock()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-e.closing:
	}
	e.setStatus(t, func() {
		t.lastStatus, t.stoppedAt = "STOPPED", time.Now()
		e.log.Info("task stopped", "task", t.id, "startedBy", t.startedBy, "stopCode", t.stopCode, "reason", t.stoppedReason)
	})
}

func (e *Emulator) runTask(t *task) {
	defer e.wg.Done()
	if !e.provision(t) {
		return
	}
	exits := make(chan exitEvent, len(t.containers))
	if !e.startContainers(t, exits) {
		return
	}
	e.log.Info("task running", "task", t.id, "startedBy", t.startedBy)
	e.setStatus(t, func() {
		now := time.Now()
		t.lastStatus, t.pullStoppedAt, t.startedAt = "RUNNING", now, now
		for _, c := range t.containers {
			c.lastStatus = "RUNNING"
		}
	})
	s := &supervisor{e: e, t: t}
	s.run(exits)
	e.finish(t, "EssentialContainerExited", "Essential container in task exited")
}

// provision takes a task through PROVISIONING and PENDING. It reports
// false, with the task stopped, when a stop came first or the profile made
// the task fail to start.
func (e *Emulator) provision(t *task) bool {
	if !e.pause(t, stepDelay) {
		e.finish(t, "UserInitiated", "Task stopped before it started")
		return false
	}
	e.setStatus(t, func() { t.lastStatus, t.pullStartedAt = "PENDING", time.Now() })
	if !e.pause(t, stepDelay) {
		e.finish(t, "UserInitiated", "Task stopped before it started")
		return false
	}
	// ACTIVATING: where ECS pulls images and creates the containers, so
	// where a start fails.
	e.setStatus(t, func() { t.lastStatus = "ACTIVATING" })
	if !e.pause(t, stepDelay) {
		e.finish(t, "UserInitiated", "Task stopped before it started")
		return false
	}
	if t.failStart {
		reason := t.failReason
		e.setStatus(t, func() {
			for _, c := range t.containers {
				c.reason = reason
			}
		})
		e.finish(t, "TaskFailedToStart", reason)
		return false
	}
	return true
}

// startContainers starts the task's containers in order. When one cannot
// start, those started are killed and the task is stopped as failed to
// start, and it reports false.
func (e *Emulator) startContainers(t *task, exits chan exitEvent) bool {
	for i, c := range t.containers {
		if err := e.startContainer(t, i, c, exits); err != nil {
			reason := fmt.Sprintf("CannotStartContainerError: container %s: %v", c.name, err)
			e.setStatus(t, func() { c.reason = reason })
			e.setStatus(t, func() {
				t.stopCode, t.stoppedReason, t.stoppingAt = "TaskFailedToStart", reason, time.Now()
			})
			e.signalAll(t, syscall.SIGKILL)
			e.collect(t, exits, i) // the containers before c started
			e.finish(t, "TaskFailedToStart", reason)
			return false
		}
	}
	return true
}

// supervisor follows a running task's containers until every one exited,
// stopping them when an essential one exits, a stop is asked for, the
// profile's infrastructure stop comes, or the emulator closes.
type supervisor struct {
	e        *Emulator
	t        *task
	stopping bool
	deactC   <-chan time.Time // fires when DEACTIVATING is over: SIGTERM
	killC    <-chan time.Time // fires StopTimeout after SIGTERM
}

func (s *supervisor) run(exits <-chan exitEvent) {
	t := s.t
	running := len(t.containers)
	closing := s.e.closing
	var infraC <-chan time.Time
	if t.infra != nil {
		timer := time.NewTimer(t.infra.after)
		defer timer.Stop()
		infraC = timer.C
	}
	for running > 0 {
		select {
		case ev := <-exits:
			running--
			if c := s.e.containerExited(t, ev); c.essential && running > 0 {
				s.beginStop()
			}
		case <-t.stopReq:
			s.beginStop()
		case <-infraC:
			infraC = nil
			s.infraStop()
		case <-s.deactC:
			s.deactC = nil
			s.term()
		case <-s.killC:
			s.killC = nil
			s.e.signalAll(t, syscall.SIGKILL)
		case <-closing:
			closing = nil
			s.e.signalAll(t, syscall.SIGKILL)
		}
	}
}

// beginStop starts stopping the task once: DEACTIVATING for a step, then
// STOPPING (term).
func (s *supervisor) beginStop() {
	if s.stopping {
		return
	}
	s.stopping = true
	s.e.setStatus(s.t, func() { s.t.lastStatus = "DEACTIVATING" })
	s.deactC = time.NewTimer(stepDelay).C
}

// term sends SIGTERM (STOPPING) and starts the wait for SIGKILL.
func (s *supervisor) term() {
	s.e.setStatus(s.t, func() { s.t.lastStatus = "STOPPING" })
	s.e.signalAll(s.t, syscall.SIGTERM)
	s.killC = time.NewTimer(s.e.opts.StopTimeout).C
}

// infraStop stops the task the way the profile's infrastructure stop says.
func (s *supervisor) infraStop() {
	if !s.e.beginInfraStop(s.t) {
		return
	}
	if s.t.infra.exitCodes {
		s.beginStop()
		return
	}
	// The host vanished. Nothing waits for a graceful exit.
	s.stopping = true
	s.e.setStatus(s.t, func() { s.t.lastStatus = "STOPPING" })
	s.e.signalAll(s.t, syscall.SIGKILL)
}

// containerExited records a container's exit. The first essential
// container to exit stops the task.
func (e *Emulator) containerExited(t *task, ev exitEvent) *container {
	c := t.containers[ev.idx]
	e.setStatus(t, func() {
		code := ev.code
		c.lastStatus, c.pid = "STOPPED", 0
		if !t.hostGone {
			c.exitCode = &code
		}
		if c.essential && t.stopCode == "" {
			t.stopCode, t.stoppedReason = "EssentialContainerExited", "Essential container in task exited"
			t.desiredStatus, t.stoppingAt = "STOPPED", time.Now()
		}
	})
	return c
}

// collect waits for n container exits, recording their codes.
func (e *Emulator) collect(t *task, exits <-chan exitEvent, n int) {
	for range n {
		ev := <-exits
		e.setStatus(t, func() {
			code := ev.code
			c := t.containers[ev.idx]
			c.exitCode, c.lastStatus, c.pid = &code, "STOPPED", 0
		})
	}
}

// signalAll signals every live container's process group, or its
// synthetic stand-in.
func (e *Emulator) signalAll(t *task, sig syscall.Signal) {
	e.mu.Lock()
	var pids []int
	for _, c := range t.containers {
		if c.pid != 0 {
			pids = append(pids, c.pid)
		}
		// A process container has a nil sig, and a send on nil takes the
		// default. A full buffer takes it too. Its two slots hold SIGTERM
		// and SIGKILL. An exited synthetic container no longer reads it.
		select {
		case c.sig <- sig:
		default:
		}
	}
	e.mu.Unlock()
	for _, pid := range pids {
		_ = syscall.Kill(-pid, sig)
	}
}

// startContainer runs a container's command in its own process group and
// streams its output lines into CloudWatch Logs.
func (e *Emulator) startContainer(t *task, idx int, c *container, exits chan<- exitEvent) error {
	if c.synthetic {
		return e.startSynthetic(t, idx, c, exits)
	}
	cmd, err := containerCommand(t, c)
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("creating stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		_ = outR.Close()
		_ = outW.Close()
		return fmt.Errorf("creating stderr pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	e.ensureStream(c.logGroup, c.logStream)
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{outR, outW, errR, errW} {
			_ = f.Close()
		}
		return err
	}
	_ = outW.Close()
	_ = errW.Close()
	pid := cmd.Process.Pid
	e.setStatus(t, func() { c.pid = pid })
	go e.awaitContainer(cmd, idx, c, exits, outR, errR)
	return nil
}

// containerCommand is the local process a container runs. It is its argv,
// with its environment and, when that directory exists here, its working
// directory, in a process group of its own.
func containerCommand(t *task, c *container) (*exec.Cmd, error) {
	if len(c.argv) == 0 {
		return nil, errors.New("no command or entryPoint (the emulator runs the container's command as a local process)")
	}
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Env = append(append([]string{}, c.env...),
		"ECS_CONTAINER_NAME="+c.name, "ECS_TASK_ARN="+t.arn)
	// An empty dir fails os.Stat, so it sets nothing.
	if st, err := os.Stat(c.dir); err == nil && st.IsDir() {
		cmd.Dir = c.dir
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

// awaitContainer copies a started container's output into its log stream
// and reports its exit once the output is drained.
func (e *Emulator) awaitContainer(cmd *exec.Cmd, idx int, c *container, exits chan<- exitEvent, outputs ...*os.File) {
	done := make(chan struct{}, len(outputs))
	for _, r := range outputs {
		go func() {
			e.pump(r, c.logGroup, c.logStream)
			_ = r.Close()
			done <- struct{}{}
		}()
	}
	_ = cmd.Wait()
	// A container's leftover processes end with it.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	for range outputs {
		<-done
	}
	exits <- exitEvent{idx: idx, code: exitCode(cmd.ProcessState)}
}

func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// pump copies output lines to a log stream.
func (e *Emulator) pump(r io.Reader, group, stream string) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			e.appendEvent(group, stream, strings.TrimRight(line, "\r\n"), time.Now())
		}
		if err != nil {
			return
		}
	}
}

// findTask resolves a task ID or ARN in a cluster. It returns the task,
// nil when unknown or purged, and its ARN.
func (e *Emulator) findTask(clusterName, ref string, now time.Time) (*task, string) {
	id, arn := ref, ref
	if strings.HasPrefix(ref, "arn:") {
		id = refID(ref)
	} else {
		arn = "arn:aws:ecs:" + region + ":" + account + ":task/" + clusterName + "/" + ref
	}
	t, ok := e.liveTask(id, now)
	if !ok || t.cluster != clusterName {
		return nil, arn
	}
	return t, arn
}

// liveTask is the task with this ID unless retention purged it. e.mu held.
func (e *Emulator) liveTask(id string, now time.Time) (*task, bool) {
	t, ok := e.tasks[id]
	return t, ok && !e.expired(t, now)
}

// refID is the task ID at the end of a task ARN.
func refID(ref string) string { return ref[strings.LastIndex(ref, "/")+1:] }

func (e *Emulator) describeTasks(req struct {
	Cluster string   `json:"cluster"`
	Tasks   []string `json:"tasks"`
	Include []string `json:"include"`
}) (any, error) {
	if len(req.Tasks) == 0 {
		return nil, invalidParam("Tasks cannot be empty.")
	}
	if len(req.Tasks) > 100 {
		return nil, invalidParam("Tasks cannot have more than 100 elements.")
	}
	withTags := slices.Contains(req.Include, "TAGS")
	e.mu.Lock()
	defer e.mu.Unlock()
	c, err := e.lookupCluster(req.Cluster)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tasks := []taskOut{}
	failures := []failure{}
	for _, ref := range req.Tasks {
		t, arn := e.findTask(c.name, ref, now)
		// A task inside its consistency window looks like an unknown one.
		if t == nil || now.Before(t.visibleAt) {
			failures = append(failures, failure{Arn: arn, Reason: "MISSING"})
			continue
		}
		tasks = append(tasks, t.render(withTags))
	}
	return map[string]any{"tasks": tasks, "failures": failures}, nil
}

type listTasksReq struct {
	Cluster           string `json:"cluster"`
	ContainerInstance string `json:"containerInstance"`
	Family            string `json:"family"`
	StartedBy         string `json:"startedBy"`
	ServiceName       string `json:"serviceName"`
	DesiredStatus     string `json:"desiredStatus"`
	LaunchType        string `json:"launchType"`
	MaxResults        *int   `json:"maxResults"`
	NextToken         string `json:"nextToken"`
}

func (e *Emulator) listTasks(req listTasksReq) (any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	strict := e.faults.StartedByOnly && req.StartedBy != ""
	if strict && req.DesiredStatus != "" {
		return nil, invalidParam("startedBy must be the only filter: it cannot be combined with desiredStatus")
	}
	limit, after, err := req.check()
	if err != nil {
		return nil, err
	}
	if strict {
		req.DesiredStatus = "" // every desired status
	}
	c, err := e.lookupCluster(req.Cluster)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var matched []*task
	for _, t := range e.tasks {
		if e.listable(t, c, after, now) && req.matches(t) {
			matched = append(matched, t)
		}
	}
	sort.Slice(matched, func(i, j int) bool { return matched[i].seq > matched[j].seq }) // newest first
	return taskPage(matched, limit), nil
}

// listable reports whether a task of cluster c is listed at now on the page
// that starts below sequence number after. A task inside its consistency
// window or already purged is not.
func (e *Emulator) listable(t *task, c *cluster, after uint64, now time.Time) bool {
	return t.cluster == c.name && !e.expired(t, now) && !now.Before(t.visibleAt) && (after == 0 || t.seq < after)
}

// combinesStartedBy reports whether the request filters on startedBy and
// on anything ListTasks cannot combine it with.
func (req *listTasksReq) combinesStartedBy() bool {
	return req.StartedBy != "" && cmp.Or(req.Family, req.ServiceName, req.LaunchType, req.ContainerInstance) != ""
}

// check validates the filters and paging of a ListTasks request, setting
// the default desired status. It returns the page size and the sequence
// number the page starts below (0: from the newest task).
func (req *listTasksReq) check() (int, uint64, error) {
	if req.combinesStartedBy() {
		return 0, 0, invalidParam("startedBy filter cannot be combined with family, serviceName, launchType or containerInstance")
	}
	limit, err := pageSize(req.MaxResults, 100, "maxResults")
	if err != nil {
		return 0, 0, err
	}
	req.DesiredStatus = cmp.Or(req.DesiredStatus, "RUNNING")
	switch req.DesiredStatus {
	case "RUNNING", "PENDING", "STOPPED":
	default:
		return 0, 0, invalidParam("desiredStatus %q is not valid", req.DesiredStatus)
	}
	after, err := decodeTaskPageToken(req.NextToken)
	if err != nil {
		return 0, 0, err
	}
	return limit, after, nil
}

// decodeTaskPageToken reads a ListTasks nextToken. Pages are keyed by the
// last task's sequence number, so tasks started between pages do not shift
// or repeat entries.
func decodeTaskPageToken(token string) (uint64, error) {
	if token == "" {
		return 0, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	var after uint64
	if err == nil {
		after, err = strconv.ParseUint(string(raw), 10, 64)
	}
	if err != nil {
		return 0, invalidParam("Invalid nextToken")
	}
	return after, nil
}

func encodeTaskPageToken(seq uint64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatUint(seq, 10)))
}

// matches reports whether a task passes the request's filters. Filtering
// on desiredStatus. ECS never sets a task's desired status to PENDING
// (ListTasks reference), so PENDING lists nothing. Tasks here have no
// container instance, so that filter lists nothing either.
func (req *listTasksReq) matches(t *task) bool {
	// Each filter set must equal the task's value.
	for _, f := range [...]struct{ want, got string }{
		{req.DesiredStatus, t.desiredStatus}, // "": every status (StartedByOnly)
		{req.StartedBy, t.startedBy},
		{req.Family, t.td.family},
		{req.LaunchType, t.launchType},
	} {
		if f.want != "" && f.got != f.want {
			return false
		}
	}
	return (req.ServiceName == "" || t.group == "service:"+req.ServiceName) && req.ContainerInstance == ""
}

// taskPage is the first limit of the tasks, newest first, with the token
// of the next page when there are more.
func taskPage(matched []*task, limit int) map[string]any {
	out := map[string]any{}
	arns := []string{}
	for i, t := range matched {
		if i == limit {
			out["nextToken"] = encodeTaskPageToken(matched[i-1].seq)
			break
		}
		arns = append(arns, t.arn)
	}
	out["taskArns"] = arns
	return out
}

func (e *Emulator) stopTask(req struct {
	Cluster string `json:"cluster"`
	Task    string `json:"task"`
	Reason  string `json:"reason"`
}) (any, error) {
	if req.Task == "" {
		return nil, invalidParam("task can not be blank.")
	}
	if len(req.Reason) > 1024 {
		return nil, invalidParam("reason must be at most 1024 characters")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	c, err := e.lookupCluster(req.Cluster)
	if err != nil {
		return nil, err
	}
	// Inside its consistency window StopTask does not know the task either.
	// The RunTask reference: a command right after it "might not be
	// immediately visible to all subsequent commands you run".
	now := time.Now()
	t, _ := e.findTask(c.name, req.Task, now)
	if t == nil || now.Before(t.visibleAt) {
		return nil, invalidParam("The referenced task was not found.")
	}
	if t.desiredStatus != "STOPPED" {
		reason := cmp.Or(req.Reason, "Task stopped by user")
		t.desiredStatus, t.stopCode, t.stoppedReason, t.stoppingAt = "STOPPED", "UserInitiated", reason, time.Now()
		t.version++
	}
	// A stopped task no longer reads stopReq. Its buffered slot just fills.
	select {
	case t.stopReq <- struct{}{}:
	default:
	}
	return map[string]any{"task": t.render(true)}, nil
}
