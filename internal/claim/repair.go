package claim

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/store"
)

// known is what this process knows it stored about one attempt it holds, or
// ended a moment ago. It is what a database that lost its history may have
// forgotten.
type known struct {
	Lease     int64
	Attempt   int
	Called    bool // the plugin was called: running was stored (or it resumed)
	Resumable bool
	StoredSeq int64  // the highest log record number the database acknowledged
	Handle    []byte // the last checkpoint the database acknowledged
	// Ended is the end the database acknowledged, for an attempt that ended.
	// Released says it was a release instead.
	Ended    *store.End
	Released bool
}

// over reports whether the attempt ended or was released.
func (k known) over() bool { return k.Ended != nil || k.Released }

// repair is what the reconcile does about one attempt. Steps run in field
// order. Reassert and MarkRunning come first, then one of Stop, Release,
// RestoreEnd and Rerelease. Lost says something the database had acknowledged
// is gone (a database_history_lost event on the job, and the metric).
type repair struct {
	Reassert    bool // the claim was lost: give the lease back to this holder
	MarkRunning bool // the running write was lost: store it again
	Stop        bool // the lease is gone: stop the runner, write nothing
	Release     bool // resumable: release it, so it resumes from the database's checkpoint and its plugin writes the lost output again
	RestoreEnd  bool // store the acknowledged end again
	Rerelease   bool // store the acknowledged release again
	// LostFrom..LostTo are output records the database lost that nobody
	// can write again (0, 0: none).
	LostFrom, LostTo int64
	Lost             bool
	Why              string
}

// decideRepair compares what this process (generation gen) knows it stored
// about an attempt with what the database now says. db is nil when the
// database does not have the job. It is pure. Every case is in its table
// test.
func decideRepair(gen string, k known, db *store.HeldState) repair {
	if db == nil {
		return missing(k)
	}
	held := db.Active && db.Generation == gen && db.Lease == k.Lease
	lostClaim := claimLost(k, *db)
	if !held && !lostClaim {
		return movedOn(k, *db)
	}
	r := repair{Reassert: lostClaim, Lost: lostClaim}
	dbSeq := db.LogSeq
	if lostClaim {
		dbSeq = 0 // the row's records were stored under an older lease
		r.Why = fmt.Sprintf("the database had lost its claim of attempt %d under lease %d; re-asserted", k.Attempt, k.Lease)
	}
	if held && runningLost(k, *db) {
		r.MarkRunning = true
		r.note("the database had lost that the plugin was called; stored again")
	}
	r.repairProgress(k, dbSeq, progressLost(k, dbSeq, db.Handle))
	return r
}

// missing is the repair of an attempt whose job the database does not have.
func missing(k known) repair {
	return repair{Stop: !k.over(), Lost: true,
		Why: "the database no longer has the job at all: its submit was lost with the database's history"}
}

// progressLost reports whether the database, which keeps records up to
// dbSeq and the checkpoint dbHandle, lost output or a resumable attempt's
// latest checkpoint.
func progressLost(k known, dbSeq int64, dbHandle []byte) bool {
	return dbSeq < k.StoredSeq || (k.Resumable && k.Called && !bytes.Equal(dbHandle, k.Handle))
}

// claimLost reports whether the database shows the attempt's claim undone:
// the job unowned, under an older lease, in the same attempt, not ended.
func claimLost(k known, db store.HeldState) bool {
	return db.Active && db.Agent == "" && db.Lease < k.Lease && db.Attempt == k.Attempt &&
		slices.Contains([]jobstate.JobStatus{store.StatusQueued, store.StatusAccepted, store.StatusRunning}, db.Status)
}

// runningLost reports whether the database lost that the plugin was called
// for an attempt that has not ended.
func runningLost(k known, db store.HeldState) bool {
	return k.Called && !k.over() && db.Status == store.StatusAccepted
}

// movedOn is the repair of an attempt whose lease the database does not
// show as this process's.
func movedOn(k known, db store.HeldState) repair {
	if k.over() {
		return repair{} // the job moved on since: nothing of ours to restore
	}
	return repair{Stop: true, Lost: true, Why: fmt.Sprintf("its lease %d is gone with the database's history (the database shows %s)", k.Lease, describeHeld(db))}
}

// repairProgress decides what restores the attempt's end, release,
// checkpoint and output, of which the database keeps records up to dbSeq.
// progressLost says it lost output or the latest checkpoint.
func (r *repair) repairProgress(k known, dbSeq int64, progressLost bool) {
	switch {
	case k.Released:
		r.Rerelease = true
		r.note("the database had lost its release; released again")
	case k.Ended != nil && k.Resumable && progressLost:
		r.Release = true
		r.note("the database had lost its end and output; released, to be resumed from the checkpoint it kept (the plugin writes the lost output again and reports the outcome again)")
	case k.Ended != nil:
		r.RestoreEnd = true
		r.note(fmt.Sprintf("the database had lost its end (%s); stored again", k.Ended.Outcome.Status))
		r.lostRecords(dbSeq, k.StoredSeq)
	case k.Resumable && progressLost:
		r.Release = true
		r.note("the database had lost its latest checkpoint and output; released, to be resumed from the checkpoint it kept (the plugin writes the lost output again)")
	default:
		r.lostRecords(dbSeq, k.StoredSeq)
	}
}

// lostRecords notes the output records past dbSeq, up to stored, that
// nobody can write again.
func (r *repair) lostRecords(dbSeq, stored int64) {
	if dbSeq < stored {
		r.LostFrom, r.LostTo = dbSeq+1, stored
		r.note(fmt.Sprintf("output records %d to %d it had stored are lost and cannot be written again", dbSeq+1, stored))
	}
}

// note marks the repair as a loss and adds why to its account.
func (r *repair) note(why string) {
	r.Lost = true
	if r.Why != "" {
		r.Why += "; "
	}
	r.Why += why
}

// describeHeld says in a few words what the database shows of a job.
func describeHeld(h store.HeldState) string {
	switch {
	case !h.Active:
		return "it " + string(h.Status) + " with no holder"
	case h.Agent == "":
		return fmt.Sprintf("it %s in attempt %d, unowned under lease %d", h.Status, h.Attempt, h.Lease)
	}
	return fmt.Sprintf("it %s in attempt %d, held by %s under lease %d", h.Status, h.Attempt, h.Agent, h.Lease)
}
