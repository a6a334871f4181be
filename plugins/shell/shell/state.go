package shell

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// record is what the plugin writes to the state directory while a run is
// alive, so that Cleanup from a later plugin process (after a crash) can find
// and recognise the run's process group. It is removed once the group is gone.
type record struct {
	JobID     string `json:"job_id"`
	Attempt   int    `json:"attempt"`
	PID       int    `json:"pid"`
	PGID      int    `json:"pgid"`
	StartTime uint64 `json:"start_time"` // /proc/<pid>/stat field 22 of the leader
	BootID    string `json:"boot_id"`
	RunID     string `json:"run_id"` // value of TETHER_SHELL_RUN_ID in the run's environment
	KillGrace string `json:"kill_grace"`
	// WorkDir is set only for a directory the plugin created and must remove.
	WorkDir string `json:"work_dir,omitempty"`
}

func recordPath(stateDir, jobID string, attempt int) string {
	return filepath.Join(stateDir, safeName(jobID)+"."+strconv.Itoa(attempt)+".json")
}

// writeRecord stores r atomically (temp file + rename), so a crash never
// leaves a half-written record.
func writeRecord(stateDir string, r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding process record: %w", err)
	}
	f, err := os.CreateTemp(stateDir, ".record-*")
	if err != nil {
		return fmt.Errorf("writing process record: %w", err)
	}
	_, err = f.Write(b)
	err = cmp.Or(err, f.Close()) // closed either way; the first error counts
	if err == nil {
		err = os.Rename(f.Name(), recordPath(stateDir, r.JobID, r.Attempt))
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing process record: %w", err)
	}
	return nil
}

func readRecord(path string) (record, error) {
	var r record
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("decoding process record %s: %w", path, err)
	}
	return r, nil
}

// jobRecords lists the record files of job id (any attempt).
func jobRecords(stateDir, id string) ([]string, error) {
	// safeName never contains glob metacharacters or '.'.
	paths, err := filepath.Glob(filepath.Join(stateDir, safeName(id)+".*.json"))
	if err != nil {
		return nil, fmt.Errorf("listing process records: %w", err)
	}
	return paths, nil
}

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

func randomHex() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand crashes the program instead)
	return hex.EncodeToString(b)
}
