package sparkeks

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		config   string
		contexts map[string]string
		want     []plugin.Problem
	}{
		{"valid; the query, image and application left to jobs", `{"kubeconfig": "/k", "namespace": "spark"}`,
			map[string]string{"a": `{}`, "b": `{"image": "spark:1", "driver": {"cores": 2}}`}, nil},
		{"found in the plugin dir, not configured, not used", ``, nil, nil},
		{"cluster access may come from the commands", `{"namespace": "spark"}`,
			map[string]string{"a": `{"kubeconfig": "/k"}`}, nil},
		{"incomplete config with no commands", `{"namespace": "spark"}`, nil,
			[]plugin.Problem{{Message: "cluster access: none configured; set exactly one of kubeconfig (a kubeconfig file's path, optionally with context), in_cluster: true, or eks_cluster (with region)"}}},
		{"bad config field is the config's, once", `{"kubeconfig": "/k", "namespace": "Not_A_Label"}`,
			map[string]string{"a": `{}`, "b": `{}`},
			[]plugin.Problem{{Field: "namespace", Message: fieldMsg(t, `{"kubeconfig": "/k", "namespace": "Not_A_Label"}`)}}},
		{"bad command context is the command's", `{"kubeconfig": "/k"}`,
			map[string]string{"ok": `{}`, "ttl": `{"time_to_live": "1s"}`, "mode": `{"query": 1}`},
			[]plugin.Problem{
				{Command: "mode", Field: "query", Message: "must be a string, got number"},
				{Command: "ttl", Field: "time_to_live", Message: fieldMsg(t, `{"kubeconfig": "/k", "time_to_live": "1s"}`)},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			contexts := map[string]json.RawMessage{}
			for k, v := range tc.contexts {
				contexts[k] = json.RawMessage(v)
			}
			got, err := New().Validate(context.Background(), json.RawMessage(tc.config), contexts)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// fieldMsg is what Execute's parsing says about config (after the field's
// name): Validate must say the same.
func fieldMsg(t *testing.T, config string) string {
	t.Helper()
	_, err := decodeConfig(json.RawMessage(config), nil)
	require.Error(t, err)
	return dec.Problem("", err).Message
}
