package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// handleEnvelope is the JSON form of a versioned handle. The key
// handle_version marks it, so a handle written before a plugin used the
// envelope reads as version 0.
type handleEnvelope struct {
	Version int             `json:"handle_version"`
	State   json.RawMessage `json:"state"`
}

// EncodeHandle returns state (encoded as JSON) in a handle envelope of
// version v, for Runtime.Checkpoint. During a rolling upgrade a plugin
// writes the oldest version every running agent's plugin reads
// (docs/plugins.md, "Handles across a rolling upgrade").
func EncodeHandle(v int, state any) ([]byte, error) {
	if v < 1 {
		return nil, fmt.Errorf("encoding handle: version %d: versions start at 1", v)
	}
	s, err := json.Marshal(state)
	if err != nil {
		return nil, fmt.Errorf("encoding handle version %d: %w", v, err)
	}
	return json.Marshal(handleEnvelope{Version: v, State: s})
}

// DecodeHandle reads a handle that EncodeHandle wrote and returns its
// version and state. A handle without the envelope (written before the
// plugin used one) is version 0, its state the whole handle. A version
// above newest, the newest this plugin reads, was written by a newer
// plugin: the error is OutcomeUnknown, because the work it names may exist
// and must not be started again, and it names both versions.
func DecodeHandle(handle []byte, newest int) (v int, state json.RawMessage, err error) {
	var probe map[string]json.RawMessage
	if json.Unmarshal(handle, &probe) != nil || probe["handle_version"] == nil {
		return 0, bytes.Clone(handle), nil
	}
	var env handleEnvelope
	if err := json.Unmarshal(handle, &env); err != nil {
		return 0, nil, Errorf(Permanent, "decoding handle: %v", err)
	}
	if env.Version > newest {
		return env.Version, nil, Errorf(OutcomeUnknown,
			"handle version %d was written by a newer plugin; this one reads versions up to %d: run the newer plugin (its work may still exist, so it is not started again)",
			env.Version, newest)
	}
	return env.Version, env.State, nil
}
