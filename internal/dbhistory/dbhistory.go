// Package dbhistory notices when the database an agent talks to no longer
// has the history the agent saw. That happens after a failover to a standby
// (a new timeline) or when a server forgot acknowledged commits (its write
// position went back). Either may have lost writes the agent was told were
// stored, so the agent must compare what it holds with what the database
// now says before it writes again (internal/claim's reconcile).
//
// The position is read on every new connection (AfterConnect) and with
// every heartbeat. After a failover every connection is new, so the first
// statement on the new primary comes after the check. Through a
// transaction pooler the client connections survive and the heartbeat
// notices within a keepalive.
package dbhistory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/queries"
)

// Position is a server's place in its history. It holds the timeline it
// writes on and its WAL write position (an LSN) on it.
type Position struct {
	Timeline uint32
	LSN      uint64
}

func (p Position) String() string {
	return fmt.Sprintf("timeline %d at %X/%X", p.Timeline, uint32(p.LSN>>32), uint32(p.LSN))
}

// Change is what a newly read position says about the history.
type Change int

const (
	// Same is the same history. It is the same timeline, at or past the
	// known position.
	Same Change = iota
	// Failover is another timeline, as after a standby's promotion. Writes
	// acknowledged before it may or may not have reached the standby.
	Failover
	// Rewound is the same timeline behind a position it reported. The server
	// lost acknowledged commits (a crash with synchronous_commit off).
	Rewound
)

// changeNames are the changes' metric labels and log values.
var changeNames = map[Change]string{Same: "same", Failover: "failover", Rewound: "rewound"}

func (c Change) String() string { return cmp.Or(changeNames[c], "same") }

// Judge compares a position read now with the newest one known.
func Judge(known, seen Position) Change {
	switch {
	case seen.Timeline != known.Timeline:
		return Failover
	case seen.LSN < known.LSN:
		return Rewound
	}
	return Same
}

// ParsePosition reads wal_position.sql's answer. That is an LSN in
// PostgreSQL's text form (hex/hex) and the timeline in hex.
func ParsePosition(lsn, timeline string) (Position, error) {
	// Without a slash lo is empty, which does not parse.
	hi, lo, _ := strings.Cut(lsn, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return Position{}, fmt.Errorf("reading the WAL position %q: want hex/hex", lsn)
	}
	tl, err := strconv.ParseUint(timeline, 16, 32)
	if err != nil {
		return Position{}, fmt.Errorf("reading the timeline %q: want hex", timeline)
	}
	return Position{Timeline: uint32(tl), LSN: h<<32 | l}, nil
}

// Row is one row of a query, as a connection's or a pool's QueryRow gives.
type Row interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Read returns the position of the server behind db. A standby cannot say
// (it is not writing). That is an error naming the fix.
func Read(ctx context.Context, db Row) (Position, error) {
	var lsn, tl string
	if err := db.QueryRow(ctx, queries.Get("wal_position")).Scan(&lsn, &tl); err != nil {
		return Position{}, fmt.Errorf("reading the database's WAL position (a server in recovery, a standby, cannot say: point database_url at the primary, e.g. with target_session_attrs=read-write): %w", err)
	}
	return ParsePosition(lsn, tl)
}

// Event is a change of history the tracker saw.
type Event struct {
	Change Change
	Known  Position // the newest position before it
	Seen   Position // the position that showed it
	// Episode numbers the changes. Settle(Episode) ends the wait only if
	// no later change came meanwhile.
	Episode int
}

// ErrNotSettled is returned by Wait when the reconcile it waited for did
// not end within the bound.
var ErrNotSettled = errors.New("the database's history changed and the agent has not finished checking what it holds")

// Tracker remembers the newest position an agent saw and, when a new one
// shows a change, calls OnChange and holds back (Wait) until Settled is
// called for its episode. Its methods are safe for concurrent use.
type Tracker struct {
	// OnChange, if set, starts the agent's reconcile. It must not block.
	// Without it a change settles at once (nothing to reconcile: a CLI).
	OnChange func(Event)

	mu       sync.Mutex
	known    Position
	have     bool
	settled  chan struct{} // closed while nothing is pending
	episodes int
}

// NewTracker returns a tracker with nothing pending.
func NewTracker() *Tracker {
	t := &Tracker{settled: make(chan struct{})}
	close(t.settled)
	return t
}

// Observe records a position. The first one is the baseline. A position on
// the known timeline moves it forward. A change (Judge) becomes the new
// known position, starts an episode (OnChange) and holds Wait until Settle.
func (t *Tracker) Observe(seen Position) Change {
	t.mu.Lock()
	if !t.have {
		t.known, t.have = seen, true
		t.mu.Unlock()
		return Same
	}
	known := t.known
	c := Judge(known, seen)
	if c == Same {
		t.known = seen
		t.mu.Unlock()
		return Same
	}
	t.known = seen
	t.episodes++
	ep := t.episodes
	select {
	case <-t.settled:
		t.settled = make(chan struct{}) // pending again
	default: // an episode is running: it will be told by its own caller
	}
	on := t.OnChange
	t.mu.Unlock()
	if on != nil {
		on(Event{Change: c, Known: known, Seen: seen, Episode: ep})
	} else {
		t.Settle(ep)
	}
	return c
}

// Settle ends the wait for the changes up to episode. Writes may go ahead,
// unless a later change came meanwhile (its own Settle ends that one).
func (t *Tracker) Settle(episode int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if episode < t.episodes {
		return
	}
	select {
	case <-t.settled:
	default:
		close(t.settled)
	}
}

// Pending returns a channel closed once no episode is pending.
func (t *Tracker) Pending() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.settled
}

// Known is the newest position seen.
func (t *Tracker) Known() (Position, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.known, t.have
}

// Wait returns once no episode is pending, or ErrNotSettled after within,
// or ctx's error.
func (t *Tracker) Wait(ctx context.Context, within time.Duration) error {
	ch := t.Pending()
	select {
	case <-ch:
		return nil
	default:
	}
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-ch:
		return nil
	case <-timer.C:
		return ErrNotSettled
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SettleBound is how long a connection waits in AfterConnect for a
// reconcile to end before it goes ahead anyway (the writes stay fenced by
// lease and holder either way. The wait only spares them refusals).
const SettleBound = 30 * time.Second

// AfterConnect is a pgxpool AfterConnect hook. It reads the new
// connection's position and, with wait, holds the connection back while a
// change it (or anything else) showed is being reconciled, so no statement
// of that pool runs on a new primary before the agent knows what it lost.
func (t *Tracker) AfterConnect(wait bool) func(ctx context.Context, conn *pgx.Conn) error {
	return func(ctx context.Context, conn *pgx.Conn) error {
		pos, err := Read(ctx, conn)
		if err != nil {
			return err
		}
		t.Observe(pos)
		if !wait {
			return nil
		}
		if err := t.Wait(ctx, SettleBound); err != nil && !errors.Is(err, ErrNotSettled) {
			return fmt.Errorf("waiting for the agent to check its jobs after the database's history changed: %w", err)
		}
		return nil
	}
}
