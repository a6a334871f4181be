package claim

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/store"
)

func TestDecideRepair(t *testing.T) {
	const gen = "g1"
	end := &store.End{Outcome: store.Outcome{Status: store.StatusSucceeded}}
	mineRow := func(status jobstate.JobStatus, seq int64, handle string) *store.HeldState {
		return &store.HeldState{Status: status, Attempt: 1, Active: true, Agent: "a", Generation: gen, Lease: 5, LogSeq: seq, Handle: []byte(handle)}
	}
	unowned := func(status jobstate.JobStatus, lease int64) *store.HeldState {
		return &store.HeldState{Status: status, Attempt: 1, Active: true, Lease: lease}
	}
	shell := known{Lease: 5, Attempt: 1, Called: true, StoredSeq: 7}
	res := known{Lease: 5, Attempt: 1, Called: true, Resumable: true, StoredSeq: 7, Handle: []byte("h2")}
	with := func(k known, f func(*known)) known { f(&k); return k }
	for _, tc := range []struct {
		name string
		k    known
		db   *store.HeldState
		want repair
	}{
		{"nothing lost", shell, mineRow("running", 7, ""), repair{}},
		{"more stored than known (a flush answered late): nothing lost", shell, mineRow("running", 9, ""), repair{}},
		{"shell: output lost", shell, mineRow("running", 4, ""), repair{LostFrom: 5, LostTo: 7, Lost: true}},
		{"shell: the running write lost", shell, mineRow("accepted", 7, ""), repair{MarkRunning: true, Lost: true}},
		{"resumable: nothing lost", res, mineRow("running", 7, "h2"), repair{}},
		{"resumable: checkpoint lost", res, mineRow("running", 7, "h1"), repair{Release: true, Lost: true}},
		{"resumable: output lost with it", res, mineRow("running", 3, "h1"), repair{Release: true, Lost: true}},
		{"resumable, not called yet: no checkpoint to compare", with(res, func(k *known) { k.Called, k.Handle, k.StoredSeq = false, nil, 0 }), mineRow("accepted", 0, ""), repair{}},
		{"resumable: running and checkpoint lost", res, mineRow("accepted", 3, ""), repair{MarkRunning: true, Release: true, Lost: true}},
		{"claim lost: re-asserted", shell, unowned("queued", 4), repair{Reassert: true, LostFrom: 1, LostTo: 7, Lost: true}},
		{"claim lost, nothing written yet", with(shell, func(k *known) { k.StoredSeq, k.Called = 0, false }), unowned("queued", 4), repair{Reassert: true, Lost: true}},
		{"resumable claim lost: re-asserted, then resumed", res, unowned("running", 4), repair{Reassert: true, Release: true, Lost: true}},
		{"lease taken by another process", shell, &store.HeldState{Status: "accepted", Attempt: 1, Active: true, Agent: "b", Generation: "g2", Lease: 5}, repair{Stop: true, Lost: true}},
		{"unowned, but another attempt", shell, &store.HeldState{Status: "queued", Attempt: 2, Active: true, Lease: 4}, repair{Stop: true, Lost: true}},
		{"unowned under a higher lease (released since)", shell, unowned("running", 6), repair{Stop: true, Lost: true}},
		{"ended by someone else", shell, &store.HeldState{Status: "failed", Attempt: 1}, repair{Stop: true, Lost: true}},
		{"the job is gone", shell, nil, repair{Stop: true, Lost: true}},
		{"ended here, end kept", with(shell, func(k *known) { k.Ended = end }), &store.HeldState{Status: "succeeded", Attempt: 1}, repair{}},
		{"ended here, end lost", with(shell, func(k *known) { k.Ended = end }), mineRow("running", 7, ""), repair{RestoreEnd: true, Lost: true}},
		{"ended here, end and output lost", with(shell, func(k *known) { k.Ended = end }), mineRow("running", 6, ""), repair{RestoreEnd: true, LostFrom: 7, LostTo: 7, Lost: true}},
		{"ended here, claim lost too", with(shell, func(k *known) { k.Ended = end; k.StoredSeq = 0 }), unowned("queued", 4), repair{Reassert: true, RestoreEnd: true, Lost: true}},
		{"resumable ended here, end and output lost: resumed", with(res, func(k *known) { k.Ended = end }), mineRow("running", 5, "h1"), repair{Release: true, Lost: true}},
		{"resumable ended here, only the end lost: restored", with(res, func(k *known) { k.Ended = end }), mineRow("running", 7, "h2"), repair{RestoreEnd: true, Lost: true}},
		{"released here, release lost", with(res, func(k *known) { k.Released = true }), mineRow("running", 7, "h2"), repair{Rerelease: true, Lost: true}},
		{"released here, taken since by another", with(res, func(k *known) { k.Released = true }), &store.HeldState{Status: "running", Attempt: 1, Active: true, Agent: "b", Generation: "g2", Lease: 6}, repair{}},
		{"the job is gone, ended here", with(shell, func(k *known) { k.Ended = end }), nil, repair{Lost: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decideRepair(gen, tc.k, tc.db)
			assert.Equal(t, tc.want.Lost, got.Why != "", "a loss is explained, and only a loss: %q", got.Why)
			got.Why = ""
			assert.Equal(t, tc.want, got)
		})
	}
}
