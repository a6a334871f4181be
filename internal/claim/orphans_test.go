package claim

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tetherjobs/tether/internal/store"
)

func TestOrphansToDetach(t *testing.T) {
	a, b, c := store.Lease{JobID: "a", Lease: 1}, store.Lease{JobID: "b", Lease: 4}, store.Lease{JobID: "c", Lease: 2}
	key := func(l store.Lease) jobKey { return jobKey{l.JobID, l.Lease} }
	for _, tc := range []struct {
		name    string
		prev    []store.Lease
		orphans []store.Lease
		known   []store.Lease
		detach  []store.Lease
		next    []store.Lease
	}{
		{name: "nothing"},
		{name: "first sighting is remembered, not detached", orphans: []store.Lease{a}, next: []store.Lease{a}},
		{name: "second sighting in a row detaches", prev: []store.Lease{a}, orphans: []store.Lease{a, b}, detach: []store.Lease{a}, next: []store.Lease{b}},
		{name: "a runner registered meanwhile: not an orphan", prev: []store.Lease{a}, orphans: []store.Lease{a}, known: []store.Lease{a}},
		{name: "gone from the answer: forgotten", prev: []store.Lease{a, b}, orphans: []store.Lease{c}, next: []store.Lease{c}},
		{name: "another lease of the same job is a new sighting", prev: []store.Lease{a}, orphans: []store.Lease{{JobID: "a", Lease: 2}}, next: []store.Lease{{JobID: "a", Lease: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := orphanWatch{}
			for _, l := range tc.prev {
				prev[key(l)] = true
			}
			known := map[jobKey]bool{}
			for _, l := range tc.known {
				known[key(l)] = true
			}
			detach, next := orphansToDetach(prev, tc.orphans, func(k jobKey) bool { return known[k] })
			assert.ElementsMatch(t, tc.detach, detach)
			want := orphanWatch{}
			for _, l := range tc.next {
				want[key(l)] = true
			}
			assert.Equal(t, want, next)
		})
	}
}
