// Package jobctx merges a command's default context with a job's own. It is
// the one rule the runner (Execute, Resume) and the janitor (Cleanup)
// share, so a plugin sees the same context whoever calls it.
package jobctx

import (
	"encoding/json"
	"fmt"
	"maps"
)

// Merge lays the job's top-level keys over the command's defaults.
func Merge(defaults, job json.RawMessage) (json.RawMessage, error) {
	if absent(defaults) {
		if absent(job) {
			return json.RawMessage(`{}`), nil
		}
		return job, nil
	}
	merged := map[string]json.RawMessage{}
	if err := json.Unmarshal(defaults, &merged); err != nil {
		return nil, fmt.Errorf("command default context: %w", err)
	}
	if !absent(job) {
		var over map[string]json.RawMessage
		if err := json.Unmarshal(job, &over); err != nil {
			return nil, fmt.Errorf("job context: %w", err)
		}
		maps.Copy(merged, over)
	}
	return json.Marshal(merged)
}

// absent reports whether a context is missing or JSON null.
func absent(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }
