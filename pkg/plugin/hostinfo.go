package plugin

import (
	"encoding/json"
	"os"
	"slices"
)

// HostEnv names the variable by which the agent tells a plugin process,
// at its start, what it is: {"version": "v1.4.2", "protocol": 1,
// "features": ["held_output", …]}. An agent older than HostEnv sets
// nothing, and Host then reports no feature.
const HostEnv = "TETHER_PLUGIN_HOST"

// Features an agent may have. A plugin that depends on one checks it with
// Host().Has and degrades, or fails its Validate, when it is missing.
const (
	// FeatureHeldOutput: a resumable plugin's output is held until its
	// next Checkpoint, stored with it, and dropped on a hand-off, so the
	// resume writes it once (docs/plugins.md, "What a job gets"). Without
	// it, output is stored as written and a resume may repeat what was
	// written after the last checkpoint.
	FeatureHeldOutput = "held_output"
	// FeatureLeaseDeadline: every call carries a lease deadline and is
	// renewed, so the SDK fences the plugin when its agent freezes.
	FeatureLeaseDeadline = "lease_deadline"
	// FeatureDescribe: checkpoints record what a Describer says.
	FeatureDescribe = "describe"
	// FeatureValidate: the agent calls Validate at start.
	FeatureValidate = "validate"
	// FeatureHealthSchedule: the agent calls HealthCheck on a schedule and
	// reports a failing plugin as unready.
	FeatureHealthSchedule = "health_schedule"
)

// HostInfo is what the agent running this plugin process said of itself.
type HostInfo struct {
	Version  string   `json:"version"`  // the agent's version ("" when unknown)
	Protocol int      `json:"protocol"` // the plugin protocol version in use
	Features []string `json:"features"`
}

// Has reports whether the agent has feature f.
func (h HostInfo) Has(f string) bool { return slices.Contains(h.Features, f) }

// Host is what the agent running this plugin process said of itself
// (HostEnv). The zero HostInfo means an agent that says nothing: older than
// every feature listed here.
func Host() HostInfo {
	var h HostInfo
	_ = json.Unmarshal([]byte(os.Getenv(HostEnv)), &h) // an unset or bad value says nothing
	return h
}

// HostFeatures are the features of this SDK's host side (internal/pluginhost
// tells its plugins them).
func HostFeatures() []string {
	return []string{FeatureHeldOutput, FeatureLeaseDeadline, FeatureDescribe, FeatureValidate, FeatureHealthSchedule}
}
