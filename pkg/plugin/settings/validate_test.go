package settings_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/settings"
)

func TestDecoderProblem(t *testing.T) {
	d := settings.Decoder{Prefix: "x: "}
	for _, tc := range []struct {
		err  error
		want plugin.Problem
	}{
		{d.Errorf("task_count: must be between 1 and 10, got 0"), plugin.Problem{Command: "c", Field: "task_count", Message: "must be between 1 and 10, got 0"}},
		{d.Errorf("driver.cores: must be a whole number"), plugin.Problem{Command: "c", Field: "driver.cores", Message: "must be a whole number"}},
		{d.Errorf(`context: unknown key "y"; known keys are a, b`), plugin.Problem{Command: "c", Message: `unknown key "y"; known keys are a, b`}},
		{d.Errorf("config.kill_grace: negative"), plugin.Problem{Command: "c", Field: "kill_grace", Message: "negative"}},
		{d.Errorf("config: must be a mapping, got array"), plugin.Problem{Command: "c", Message: "must be a mapping, got array"}},
		{d.Errorf("context.driver.cores: too many"), plugin.Problem{Command: "c", Field: "driver.cores", Message: "too many"}},
		{d.Errorf("configs.x: bad"), plugin.Problem{Command: "c", Field: "configs.x", Message: "bad"}},
		{d.Errorf("both a and b are set; set one"), plugin.Problem{Command: "c", Message: "both a and b are set; set one"}},
		{d.Errorf("cluster access: none configured"), plugin.Problem{Command: "c", Message: "cluster access: none configured"}},
	} {
		require.Equal(t, tc.want, d.Problem("c", tc.err))
	}
}

func TestDecoderValidate(t *testing.T) {
	d := settings.Decoder{}
	// decode fails on a "bad" key in either, and needs "need" in one of them.
	decode := func(config, context json.RawMessage) error {
		merged := map[string]any{}
		for _, raw := range []json.RawMessage{config, context} {
			if len(raw) > 0 {
				if err := json.Unmarshal(raw, &merged); err != nil {
					return err
				}
			}
		}
		if v, ok := merged["bad"]; ok {
			return d.Errorf("bad: is %v", v)
		}
		if _, ok := merged["need"]; !ok {
			return errors.New("need: missing")
		}
		return nil
	}
	ctxs := func(kv ...string) map[string]json.RawMessage {
		m := map[string]json.RawMessage{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = json.RawMessage(kv[i+1])
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		config   string
		contexts map[string]json.RawMessage
		want     []plugin.Problem
	}{
		{"config alone fine", `{"need": 1}`, nil, nil},
		{"empty config, no commands", ``, nil, nil},
		{"config alone bad", `{"bad": 1}`, nil, []plugin.Problem{{Field: "bad", Message: "is 1"}}},
		{"config incomplete but every command completes it", `{}`, ctxs("a", `{"need": 1}`), nil},
		{"config's error reported once", `{"need": 1, "bad": 1}`, ctxs("a", `{}`, "b", `{}`), []plugin.Problem{{Field: "bad", Message: "is 1"}}},
		{"command's own error", `{"need": 1}`, ctxs("a", `{}`, "b", `{"bad": 2}`), []plugin.Problem{{Command: "b", Field: "bad", Message: "is 2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, d.Validate(json.RawMessage(tc.config), tc.contexts, decode))
		})
	}
}
