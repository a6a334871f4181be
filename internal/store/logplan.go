package store

import (
	"strconv"
	"time"
)

// logState is what the database holds of one job's output under its lease,
// read (and locked) before an append.
type logState struct {
	storedSeq int64    // highest record number stored under this lease
	bytes     [2]int64 // stdout, stderr bytes stored so far
	truncated [2]bool  // the stream was cut at its cap already
	attempt   int32
}

// logAccount is what one append stored of one job, for its active row.
type logAccount struct {
	jobID  string
	kept   [2]int64 // stdout, stderr bytes stored
	cut    [2]bool  // the stream reached its cap in this append
	topSeq int64    // the highest record number among those not stored before
	rows   int      // chunks inserted
}

// streamIndex is a stream's place in logState and logAccount.
func streamIndex(stream string) int {
	if stream == "stderr" {
		return 1
	}
	return 0
}

// truncationMarker is the line stored after the last bytes of a stream cut
// at its cap of limit bytes.
func truncationMarker(stream string, limit int64) []byte {
	return []byte("\n[tether: " + stream + " truncated at " + strconv.FormatInt(limit, 10) + " bytes; raise logs.max_bytes_per_stream to keep more]\n")
}

// planLogs decides what an append stores: of each batch whose job's fence
// held (it is in states, under the batch's lease), the records not stored
// before (Seq 0, or above the stored number), each stream cut at limit
// bytes with one truncation marker after the record that crosses it. It
// returns the job_logs rows in write order (job_id, stream, at, attempt,
// data) and, per job that had records not stored before, what its active
// row must record. now stamps the Stdout and Stderr shorthand.
func planLogs(batches []LogBatch, states map[string]logState, limit int64, now time.Time) ([][]any, []logAccount) {
	var rows [][]any
	var accounts []logAccount
	for _, b := range batches {
		st, ok := states[b.JobID]
		if !ok {
			continue
		}
		acc := logAccount{jobID: b.JobID}
		fresh := false
		for _, r := range batchRecords(b, now) {
			if r.Seq != 0 && r.Seq <= st.storedSeq {
				continue // stored by an earlier send whose answer was lost
			}
			fresh = true
			acc.topSeq = max(acc.topSeq, r.Seq)
			rows = planRecord(rows, &acc, &st, r, b.JobID, limit)
		}
		if fresh {
			states[b.JobID] = st
			accounts = append(accounts, acc)
		}
	}
	return rows, accounts
}

// planRecord appends r's rows: what fits under its stream's cap, and the
// marker if r crosses it. st and acc count it.
func planRecord(rows [][]any, acc *logAccount, st *logState, r LogRecord, jobID string, limit int64) [][]any {
	s := streamIndex(r.Stream)
	room := max(0, limit-st.bytes[s])
	keep := r.Data[:min(int64(len(r.Data)), room)]
	if len(keep) > 0 {
		rows = append(rows, []any{jobID, r.Stream, r.At, st.attempt, keep})
		acc.rows++
	}
	st.bytes[s] += int64(len(keep))
	acc.kept[s] += int64(len(keep))
	if !st.truncated[s] && int64(len(r.Data)) > room {
		st.truncated[s], acc.cut[s] = true, true
		rows = append(rows, []any{jobID, r.Stream, r.At, st.attempt, truncationMarker(r.Stream, limit)})
		acc.rows++
	}
	return rows
}

// batchRecords are b's records in write order, then its Stdout and Stderr
// shorthand stamped now, with no identity. Empty records are left out.
func batchRecords(b LogBatch, now time.Time) []LogRecord {
	out := make([]LogRecord, 0, len(b.Records)+2)
	for _, r := range b.Records {
		if len(r.Data) > 0 {
			out = append(out, r)
		}
	}
	if len(b.Stdout) > 0 {
		out = append(out, LogRecord{Stream: "stdout", At: now, Data: b.Stdout})
	}
	if len(b.Stderr) > 0 {
		out = append(out, LogRecord{Stream: "stderr", At: now, Data: b.Stderr})
	}
	return out
}
