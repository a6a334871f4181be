package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestPlanLogs covers what one append stores: records already stored are
// skipped, each stream is cut at its cap with one marker, and the active
// row is told what was kept.
func TestPlanLogs(t *testing.T) {
	at := time.Unix(100, 0)
	rec := func(seq int64, stream, data string) LogRecord {
		return LogRecord{Seq: seq, Stream: stream, At: at, Data: []byte(data)}
	}
	marker := func(stream string) string { return string(truncationMarker(stream, 5)) }
	tests := []struct {
		name     string
		state    logState
		records  []LogRecord
		stdout   string
		rows     []string // stream:data in order
		accounts []logAccount
	}{
		{name: "all new", records: []LogRecord{rec(1, "stdout", "ab"), rec(2, "stderr", "c")},
			rows:     []string{"stdout:ab", "stderr:c"},
			accounts: []logAccount{{jobID: "j", kept: [2]int64{2, 1}, topSeq: 2, rows: 2}}},
		{name: "resend skipped", state: logState{storedSeq: 1, bytes: [2]int64{2, 0}},
			records:  []LogRecord{rec(1, "stdout", "ab"), rec(2, "stdout", "c")},
			rows:     []string{"stdout:c"},
			accounts: []logAccount{{jobID: "j", kept: [2]int64{1, 0}, topSeq: 2, rows: 1}}},
		{name: "all stored before", state: logState{storedSeq: 2}, records: []LogRecord{rec(1, "stdout", "ab"), rec(2, "stdout", "c")}},
		{name: "cut at the cap once", state: logState{bytes: [2]int64{3, 0}},
			records:  []LogRecord{rec(1, "stdout", "abc"), rec(2, "stdout", "d"), rec(3, "stderr", "xy")},
			rows:     []string{"stdout:ab", "stdout:" + marker("stdout"), "stderr:xy"},
			accounts: []logAccount{{jobID: "j", kept: [2]int64{2, 2}, cut: [2]bool{true, false}, topSeq: 3, rows: 3}}},
		{name: "exactly full, then more", state: logState{bytes: [2]int64{5, 0}},
			records:  []LogRecord{rec(1, "stdout", "a")},
			rows:     []string{"stdout:" + marker("stdout")},
			accounts: []logAccount{{jobID: "j", cut: [2]bool{true, false}, topSeq: 1, rows: 1}}},
		{name: "already truncated", state: logState{bytes: [2]int64{5, 0}, truncated: [2]bool{true, false}},
			records:  []LogRecord{rec(1, "stdout", "a")},
			accounts: []logAccount{{jobID: "j", topSeq: 1}}},
		{name: "shorthand has no identity", state: logState{storedSeq: 9}, stdout: "z",
			rows:     []string{"stdout:z"},
			accounts: []logAccount{{jobID: "j", kept: [2]int64{1, 0}, rows: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := LogBatch{JobID: "j", Lease: 1, Records: tt.records, Stdout: []byte(tt.stdout)}
			lost := LogBatch{JobID: "lost", Lease: 1, Records: []LogRecord{rec(1, "stdout", "never")}}
			rows, accounts := planLogs([]LogBatch{b, lost}, map[string]logState{"j": tt.state}, 5, at)
			var got []string
			for _, r := range rows {
				assert.Equal(t, "j", r[0])
				got = append(got, r[1].(string)+":"+string(r[4].([]byte)))
			}
			assert.Equal(t, tt.rows, got)
			assert.Equal(t, tt.accounts, accounts)
		})
	}
}
