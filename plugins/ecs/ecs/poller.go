package ecs

import (
	"context"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

const (
	// describeBatch is DescribeTasks' limit of tasks per call.
	describeBatch = 100
	// maxThrottleBackoff caps how far the poller stretches its round while
	// ECS throttles it.
	maxThrottleBackoff = 8
)

// poller follows every task the plugin process watches on one cluster,
// whatever job it belongs to. One round describes them all, 100 per
// DescribeTasks call, and hands each job what was said about its tasks.
// The round is every poll_interval (the smallest the watching jobs ask for),
// stretched so the round's calls fit the process's describe_tasks rate. At
// 1,000 tasks and 4 calls/s, 10 calls take 2.5 s, so a 6 s interval holds.
// At 10,000 tasks a round takes 25 s.
type poller struct {
	cl      *clients
	cluster string

	mu      sync.Mutex
	subs    map[*watchSub]bool
	owners  map[string]*watchSub // task ARN -> the job watching it
	running bool
}

func newPoller(cl *clients, cluster string) *poller {
	return &poller{cl: cl, cluster: cluster, subs: map[*watchSub]bool{}, owners: map[string]*watchSub{}}
}

// seen is what one round said about one task.
type seen struct {
	task    types.Task // when !missing
	missing bool       // DescribeTasks answered MISSING
}

// watchSub is one job's subscription. It holds the tasks it watches and what
// the last rounds said about them, collected until the job takes them.
type watchSub struct {
	p        *poller
	interval time.Duration

	mu    sync.Mutex
	got   map[string]seen
	err   error // of the last round that failed for these tasks
	ready chan struct{}
}

// subscribe starts a job's subscription. Close it when the job's run ends.
func (p *poller) subscribe(interval time.Duration) *watchSub {
	s := &watchSub{p: p, interval: interval, got: map[string]seen{}, ready: make(chan struct{}, 1)}
	p.mu.Lock()
	p.subs[s] = true
	p.mu.Unlock()
	return s
}

// watch adds a task to the subscription.
func (s *watchSub) watch(arn string) {
	p := s.p
	p.mu.Lock()
	p.owners[arn] = s
	if !p.running {
		p.running = true
		go p.loop()
	}
	p.mu.Unlock()
}

// unwatch drops a task (it settled).
func (s *watchSub) unwatch(arn string) {
	p := s.p
	p.mu.Lock()
	if p.owners[arn] == s {
		delete(p.owners, arn)
	}
	p.mu.Unlock()
	s.mu.Lock()
	delete(s.got, arn)
	s.mu.Unlock()
}

func (s *watchSub) close() {
	p := s.p
	p.mu.Lock()
	delete(p.subs, s)
	maps.DeleteFunc(p.owners, func(_ string, o *watchSub) bool { return o == s })
	p.mu.Unlock()
}

// take returns what was said since the last take, and the error of the
// last failed round (nil if the latest round succeeded).
func (s *watchSub) take() (map[string]seen, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, err := s.got, s.err
	s.got, s.err = map[string]seen{}, nil
	return got, err
}

func (s *watchSub) deliver(arn string, v seen) {
	s.mu.Lock()
	s.got[arn] = v
	s.err = nil
	s.mu.Unlock()
	s.notify()
}

func (s *watchSub) fail(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
	s.notify()
}

func (s *watchSub) notify() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// loop runs rounds while any task is watched, and ends when none is (the
// next watch starts it again).
func (p *poller) loop() {
	backoff := 1
	for {
		p.mu.Lock()
		if len(p.owners) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		// A watched task's job is subscribed, so subs is not empty.
		interval := time.Duration(math.MaxInt64)
		for s := range p.subs {
			interval = min(interval, s.interval)
		}
		arns := slices.Collect(maps.Keys(p.owners))
		p.mu.Unlock()
		slices.Sort(arns)

		start := time.Now()
		throttled := false
		for chunk := range slices.Chunk(arns, describeBatch) {
			if p.describe(chunk) {
				throttled = true
			}
		}
		if throttled {
			backoff = min(backoff*2, maxThrottleBackoff)
		} else {
			backoff = 1
		}
		// Nothing cancels a round. The poller serves every job of the
		// process, and its loop ends when no task is watched (a task
		// watched meanwhile is, by ECS's consistency, not visible yet).
		time.Sleep(time.Duration(backoff)*interval - time.Since(start))
	}
}

// describe asks about one batch and hands the answers out. It reports
// whether ECS throttled it.
func (p *poller) describe(arns []string) bool {
	// Not a job's context. The round serves every job. A call is bounded
	// by the SDK's retries. A budget wait is bounded by the rate.
	ctx := context.Background()
	_ = p.cl.wait(ctx, apiDescribeTasks)
	out, err := p.cl.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(p.cluster), Tasks: arns})
	if err != nil {
		p.cl.log.Warn("describing tasks", "cluster", p.cluster, "tasks", len(arns), "err", err)
		cerr := classify("describing tasks", err)
		p.handOut(arns, func(s *watchSub, _ string) { s.fail(cerr) })
		return throttlingCodes[errorCode(err)]
	}
	got := make(map[string]seen, len(arns))
	for _, task := range out.Tasks {
		got[aws.ToString(task.TaskArn)] = seen{task: task}
	}
	for _, f := range out.Failures {
		if aws.ToString(f.Reason) == "MISSING" {
			got[aws.ToString(f.Arn)] = seen{missing: true}
		}
	}
	p.handOut(slices.Collect(maps.Keys(got)), func(s *watchSub, arn string) { s.deliver(arn, got[arn]) })
	return false
}

// handOut calls give with each of arns still watched and the job watching
// it. It holds p.mu, so a task unwatched meanwhile is given nothing.
func (p *poller) handOut(arns []string, give func(s *watchSub, arn string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, arn := range arns {
		if s := p.owners[arn]; s != nil {
			give(s, arn)
		}
	}
}
