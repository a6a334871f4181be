package notify

import "testing"

func woken(s *Sub) bool {
	select {
	case <-s.C():
		return true
	default:
		return false
	}
}

func TestDeliverRoutesByJobAndChannel(t *testing.T) {
	for _, tc := range []struct {
		name         string
		channel, job string
		mine, known  bool
	}{
		{"logs of my job", LogsChannel, "j1", true, true},
		{"end of my job", JobEndChannel, "j1", true, true},
		{"logs of another job", LogsChannel, "j2", false, true},
		{"a channel not ours", "tether_jobs", "j1", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New()
			s := h.Subscribe("j1")
			defer s.Close()
			if got := h.Deliver(tc.channel, tc.job); got != tc.known {
				t.Errorf("Deliver(%q) = %v, want %v", tc.channel, got, tc.known)
			}
			if got := woken(s); got != tc.mine {
				t.Errorf("woken = %v, want %v", got, tc.mine)
			}
		})
	}
}

func TestWakeUpsCoalesceAndCloseUnsubscribes(t *testing.T) {
	h := New()
	a, b := h.Subscribe("j"), h.Subscribe("j")
	for range 3 {
		h.Deliver(LogsChannel, "j") // never blocks, however many
	}
	if !woken(a) || woken(a) {
		t.Error("three notifications should be one pending wake-up")
	}
	b.Close()
	if h.Followers() != 1 {
		t.Errorf("Followers() = %d after a Close, want 1", h.Followers())
	}
	a.Close()
	if len(h.subs) != 0 {
		t.Errorf("no subscriptions should be left, got %v", h.subs)
	}
}

// Losing the listener wakes every follower (to poll), and so does getting
// it back (to read what was written meanwhile). A repeat is no change.
func TestLivenessChangesWakeEveryone(t *testing.T) {
	h := New()
	s := h.Subscribe("j")
	defer s.Close()
	for _, step := range []struct {
		live, wake bool
	}{{true, true}, {true, false}, {false, true}, {false, false}, {true, true}} {
		h.SetLive(step.live)
		if w := woken(s); h.Live() != step.live || w != step.wake {
			t.Fatalf("SetLive(%v): live %v, woken %v; want woken %v", step.live, h.Live(), w, step.wake)
		}
	}
}

func TestNilHubNeverLive(t *testing.T) {
	var h *Hub
	s := h.Subscribe("j")
	h.SetLive(true)
	h.Deliver(LogsChannel, "j")
	if h.Live() || woken(s) || h.Followers() != 0 {
		t.Error("a nil hub is never live and never wakes")
	}
	s.Close()
}
