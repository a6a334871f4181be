package plugin_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
)

type runState struct {
	Run     string `json:"run"`
	Written int    `json:"written"`
}

// A handle goes through the envelope and back with its version.
func TestHandleEnvelopeRoundTrip(t *testing.T) {
	b, err := plugin.EncodeHandle(2, runState{Run: "r1", Written: 7})
	require.NoError(t, err)
	assert.JSONEq(t, `{"handle_version": 2, "state": {"run": "r1", "written": 7}}`, string(b))

	v, state, err := plugin.DecodeHandle(b, 2)
	require.NoError(t, err)
	assert.Equal(t, 2, v)
	var got runState
	require.NoError(t, json.Unmarshal(state, &got))
	assert.Equal(t, runState{Run: "r1", Written: 7}, got)
}

func TestDecodeHandle(t *testing.T) {
	for _, tc := range []struct {
		name      string
		handle    string
		newest    int
		version   int
		state     string // "" when an error is expected
		class     plugin.ErrorClass
		errSubstr string
	}{
		{name: "before the envelope: version 0, the whole handle", handle: `{"run":"r1","written":3}`, newest: 1, version: 0, state: `{"run":"r1","written":3}`},
		{name: "not JSON: version 0, the bytes as they are", handle: `v1:r1:3`, newest: 1, version: 0, state: `v1:r1:3`},
		{name: "an older version", handle: `{"handle_version":1,"state":{"run":"r1"}}`, newest: 2, version: 1, state: `{"run":"r1"}`},
		{name: "the newest version", handle: `{"handle_version":2,"state":{"run":"r1"}}`, newest: 2, version: 2, state: `{"run":"r1"}`},
		{name: "a newer plugin's version is outcome_unknown", handle: `{"handle_version":3,"state":{}}`, newest: 2, version: 3,
			class: plugin.OutcomeUnknown, errSubstr: "handle version 3 was written by a newer plugin; this one reads versions up to 2"},
		{name: "a broken envelope is permanent", handle: `{"handle_version":"two","state":{}}`, newest: 2,
			class: plugin.Permanent, errSubstr: "decoding handle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, state, err := plugin.DecodeHandle([]byte(tc.handle), tc.newest)
			if tc.errSubstr != "" {
				require.Error(t, err)
				assert.Equal(t, tc.class, plugin.ClassOf(err))
				assert.Contains(t, err.Error(), tc.errSubstr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.version, v)
			assert.Equal(t, tc.state, string(state))
		})
	}
}

// Versions start at 1, so version 0 always means "before the envelope".
func TestEncodeHandleRefusesVersionZero(t *testing.T) {
	_, err := plugin.EncodeHandle(0, runState{})
	require.ErrorContains(t, err, "versions start at 1")
}
