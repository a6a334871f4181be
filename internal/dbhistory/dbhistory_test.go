package dbhistory

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJudge(t *testing.T) {
	at := func(tl uint32, lsn uint64) Position { return Position{Timeline: tl, LSN: lsn} }
	for _, tc := range []struct {
		name        string
		known, seen Position
		want        Change
	}{
		{"same place", at(1, 100), at(1, 100), Same},
		{"moved on", at(1, 100), at(1, 250), Same},
		{"a promoted standby: new timeline, further on", at(1, 100), at(2, 400), Failover},
		{"a promoted standby that lost the tail: new timeline, behind", at(1, 400), at(2, 120), Failover},
		{"back on an older timeline (the old primary came back)", at(2, 400), at(1, 500), Failover},
		{"same timeline, behind: commits forgotten", at(1, 400), at(1, 399), Rewound},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, Judge(tc.known, tc.seen)) })
	}
}

func TestParsePosition(t *testing.T) {
	p, err := ParsePosition("1/3007AB8", "00000002")
	require.NoError(t, err)
	assert.Equal(t, Position{Timeline: 2, LSN: 1<<32 | 0x3007AB8}, p)
	assert.Equal(t, "timeline 2 at 1/3007AB8", p.String())
	_, err = ParsePosition("nope", "00000001")
	assert.ErrorContains(t, err, "want hex/hex")
	_, err = ParsePosition("0/1", "zz")
	assert.ErrorContains(t, err, "want hex")
}

// TestTrackerEpisodes checks that the first position is the baseline. A
// change holds Wait until its episode is settled, and a second change during
// the first episode's reconcile keeps it held until the second is settled
// too.
func TestTrackerEpisodes(t *testing.T) {
	var got []Event
	tr := NewTracker()
	tr.OnChange = func(e Event) { got = append(got, e) }
	ctx := context.Background()

	assert.Equal(t, Same, tr.Observe(Position{1, 100}))
	assert.Equal(t, Same, tr.Observe(Position{1, 200}))
	require.NoError(t, tr.Wait(ctx, time.Millisecond))
	assert.Empty(t, got)

	assert.Equal(t, Failover, tr.Observe(Position{2, 150}))
	require.Len(t, got, 1)
	assert.Equal(t, Event{Change: Failover, Known: Position{1, 200}, Seen: Position{2, 150}, Episode: 1}, got[0])
	assert.ErrorIs(t, tr.Wait(ctx, 10*time.Millisecond), ErrNotSettled)

	assert.Equal(t, Rewound, tr.Observe(Position{2, 120}))
	tr.Settle(1) // the first reconcile ends: the second change still waits
	assert.ErrorIs(t, tr.Wait(ctx, 10*time.Millisecond), ErrNotSettled)
	tr.Settle(got[1].Episode)
	require.NoError(t, tr.Wait(ctx, time.Millisecond))

	known, ok := tr.Known()
	assert.True(t, ok)
	assert.Equal(t, Position{2, 120}, known, "the changed position is the new baseline")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	tr.Observe(Position{3, 1})
	assert.ErrorIs(t, tr.Wait(cctx, time.Minute), context.Canceled)
}

// TestTrackerWithoutReconciler checks that with nobody to reconcile (a
// CLI), a change settles at once.
func TestTrackerWithoutReconciler(t *testing.T) {
	tr := NewTracker()
	tr.Observe(Position{1, 5})
	assert.Equal(t, Failover, tr.Observe(Position{2, 1}))
	require.NoError(t, tr.Wait(context.Background(), time.Millisecond))
}

func TestChangeString(t *testing.T) {
	assert.Equal(t, "same", Same.String())
	assert.Equal(t, "failover", Failover.String())
	assert.Equal(t, "rewound", Rewound.String())
	assert.Equal(t, "same", Change(7).String(), "an unknown change reads as same, as before")
}

func TestParsePositionNeedsASlash(t *testing.T) {
	_, err := ParsePosition("3007AB8", "1")
	assert.ErrorContains(t, err, `reading the WAL position "3007AB8": want hex/hex`)
	_, err = ParsePosition("1/", "1")
	assert.Error(t, err)
	_, err = ParsePosition("1/2/3", "1")
	assert.Error(t, err)
}
