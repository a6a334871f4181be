// Package jobctx merges a command's default context with a job's own. It is
// the one rule the runner (Execute, Resume) and the janitor (Cleanup)
// share, so a plugin sees the same context whoever calls it.
package jobctx

import (
	"encoding/json"
	"fmt"
)

// Merge lays the job's top-level keys over the command's defaults.
func Merge(defaults, job json.RawMessage) (json.RawMessage, error) {
	if len(defaults) == 0 || string(defaults) == "null" {
		if len(job) == 0 || string(job) == "null" {
			return json.RawMessage(`{}`), nil
		}
		return job, nil
	}
	merged := map[string]json.RawMessage{}
	if err := json.Unmarshal(defaults, &merged); err != nil {
		return nil, fmt.Errorf("command default context: %w", err)
	}
	if len(job) > 0 && string(job) != "null" {
		var over map[string]json.RawMessage
		if err := json.Unmarshal(job, &over); err != nil {
			return nil, fmt.Errorf("job context: %w", err)
		}
		for k, v := range over {
			merged[k] = v
		}
	}
	return json.Marshal(merged)
}
