package api_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/tetherjobs/tether/pkg/api"
)

// A job's limits travel as strings and come back as the same durations.
func TestLimitsJSON(t *testing.T) {
	l := api.Limits{MaxRetry: 2, RetryBackoff: 10 * time.Second, RetryBackoffMax: 10 * time.Minute,
		ActiveTimeout: 90 * time.Minute, TTLSucceeded: 7 * 24 * time.Hour, TTLFailed: 36 * time.Hour}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"max_retry":2,"retry_backoff":"10s","retry_backoff_max":"10m0s","pending_timeout":"0s","active_timeout":"1h30m0s","ttl_succeeded":"7d","ttl_failed":"36h0m0s"}`
	if string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
	var back api.Limits
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != l {
		t.Errorf("round trip: got %+v, want %+v", back, l)
	}
	if err := json.Unmarshal([]byte(`{"ttl_failed":"soon"}`), &back); err == nil {
		t.Error("a malformed duration decoded")
	}
}

// A reader of a followed stream tells lines and events from the end record.
func TestStreamRecords(t *testing.T) {
	var line api.LogRecord
	if err := json.Unmarshal([]byte(`{"seq":3,"attempt":2,"stream":"stdout","time":"2026-01-01T00:00:00Z","line":"","partial":false}`), &line); err != nil {
		t.Fatal(err)
	}
	if line.End || line.Seq != 3 || line.Attempt != 2 {
		t.Errorf("line record: %+v", line)
	}
	end := api.StreamEnd{End: true, Status: api.StatusFailed, Attempt: 2}
	b, err := json.Marshal(end)
	if err != nil {
		t.Fatal(err)
	}
	var lr api.LogRecord
	var er api.EventRecord
	if err := json.Unmarshal(b, &lr); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &er); err != nil {
		t.Fatal(err)
	}
	if !lr.End || lr.EndRecord() != end || !er.End || er.EndRecord() != end {
		t.Errorf("end record: log %+v, event %+v, want %+v", lr.EndRecord(), er.EndRecord(), end)
	}
}

func TestStatuses(t *testing.T) {
	var terminal []api.JobStatus
	for _, s := range api.Statuses() {
		if s.Terminal() {
			terminal = append(terminal, s)
		}
	}
	if len(terminal) != 3 || terminal[0] != api.StatusSucceeded || terminal[1] != api.StatusFailed || terminal[2] != api.StatusCanceled {
		t.Errorf("terminal statuses: %v", terminal)
	}
}
