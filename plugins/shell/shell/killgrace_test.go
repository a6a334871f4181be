package shell

import (
	"encoding/json"
	"testing"
	"time"
)

// The plugin reports the max_kill_grace its config sets, else its default,
// for the agent's self-fence arithmetic.
func TestMaxKillGrace(t *testing.T) {
	p := New()
	for _, tc := range []struct {
		config string
		want   time.Duration
	}{
		{``, DefaultMaxKillGrace},
		{`{"kill_grace": "1s"}`, DefaultMaxKillGrace},
		{`{"kill_grace": "1s", "max_kill_grace": "1500ms"}`, 1500 * time.Millisecond},
		{`{"max_kill_grace": "5m"}`, 5 * time.Minute},
	} {
		got, err := p.MaxKillGrace(json.RawMessage(tc.config))
		if err != nil || got != tc.want {
			t.Errorf("MaxKillGrace(%s) = %s, %v; want %s", tc.config, got, err, tc.want)
		}
	}
	if _, err := p.MaxKillGrace(json.RawMessage(`{"max_kill_grace": "long"}`)); err == nil {
		t.Error("a config whose max_kill_grace is not a duration reports no grace")
	}
}
