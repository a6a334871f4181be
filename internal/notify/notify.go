// Package notify fans an agent's job notifications out to the API's
// followers. The claim service's LISTEN connection (one per agent) delivers
// them here, and each followed log or event stream subscribes to its job.
//
// Notifications only make followers prompt. A follower still polls, slowly
// while the hub is live and quickly while it is not (the LISTEN connection
// is down and being re-established), so nothing is missed either way.
package notify

import (
	"slices"
	"sync"
)

// Channels the followers' notifications arrive on. The payload is a job ID.
const (
	// LogsChannel is notified when a flush stored output of the job
	// (queries/log_account.sql).
	LogsChannel = "tether_logs"
	// JobEndChannel is notified when the job reached a terminal status
	// (queries/attempt_end*.sql, job_cancel_queued.sql).
	JobEndChannel = "tether_job_end"
)

// Channels lists what a listener feeding a Hub must LISTEN on.
func Channels() []string { return []string{LogsChannel, JobEndChannel} }

// Hub routes job notifications to the subscriptions of that job. A nil *Hub
// is valid. It is never live and its subscriptions never fire.
type Hub struct {
	mu   sync.Mutex
	subs map[string]map[*Sub]struct{}
	live bool
}

// New returns a hub with no listener yet (not live).
func New() *Hub {
	return &Hub{subs: map[string]map[*Sub]struct{}{}}
}

// Sub is one follower's subscription to one job.
type Sub struct {
	hub *Hub
	job string
	c   chan struct{}
}

// Subscribe returns a subscription to jobID's notifications. Subscribe
// before reading what is already stored, so a notification sent in between
// is not lost. Close it when done.
func (h *Hub) Subscribe(jobID string) *Sub {
	s := &Sub{hub: h, job: jobID, c: make(chan struct{}, 1)}
	if h == nil {
		return s
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs[jobID] == nil {
		h.subs[jobID] = map[*Sub]struct{}{}
	}
	h.subs[jobID][s] = struct{}{}
	return s
}

// C receives a value when there may be something new for the job (also
// when the hub goes live or stops being live). Wake-ups coalesce. One value
// may stand for many notifications.
func (s *Sub) C() <-chan struct{} { return s.c }

// Close ends the subscription.
func (s *Sub) Close() {
	h := s.hub
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs[s.job], s)
	if len(h.subs[s.job]) == 0 {
		delete(h.subs, s.job)
	}
}

func (s *Sub) wake() {
	select {
	case s.c <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// Deliver routes one notification. It reports whether the channel is one of
// the hub's. It never blocks.
func (h *Hub) Deliver(channel, jobID string) bool {
	if !slices.Contains(Channels(), channel) {
		return false
	}
	if h == nil {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[jobID] {
		s.wake()
	}
	return true
}

// SetLive records whether the listener is connected and listening. Every
// subscription is woken on a change. After a loss they must poll, and after
// a reconnect they must read what was written while nobody listened.
func (h *Hub) SetLive(live bool) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.live == live {
		return
	}
	h.live = live
	for _, subs := range h.subs {
		for s := range subs {
			s.wake()
		}
	}
}

// Live reports whether notifications are arriving.
func (h *Hub) Live() bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.live
}

// Followers returns how many subscriptions are open (for tests and metrics).
func (h *Hub) Followers() int {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, subs := range h.subs {
		n += len(subs)
	}
	return n
}
