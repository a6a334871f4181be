package pluginhost_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pluginhost"
	"github.com/tetherjobs/tether/pkg/plugin/plugintest"
)

// syncBuffer is a bytes.Buffer the plugin's log goroutines may write to
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		out = append(out, r)
	}
	return out
}

// TestPluginLogsReachTheAgentLog runs a plugin that logs through log, slog,
// hclog's default and an hclog logger of its own. Each line reaches the
// agent's log once, at its level, with the plugin's name and its fields, and
// nothing below the agent's level is kept.
func TestPluginLogsReachTheAgentLog(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		t.Run(level.String(), func(t *testing.T) {
			var buf syncBuffer
			m := start(t, pluginhost.Config{Dir: pluginDir(t, map[string]string{"noop": "noop"}),
				Logger: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level}))})
			_, err := m.Execute(context.Background(), "noop", job("j-log", `{"log": true}`), plugintest.NewRuntime(nil))
			require.NoError(t, err)
			m.Close() // the process's stderr is read to its end

			find := func(msg string) []map[string]any {
				var got []map[string]any
				for _, r := range buf.records(t) {
					if s, _ := r["msg"].(string); strings.Contains(s, msg) {
						got = append(got, r)
					}
				}
				return got
			}
			want := []struct {
				msg, level string
				fields     map[string]any
			}{
				{"std log line of j-log", "INFO", nil},
				{"slog info line", "INFO", map[string]any{"job": "j-log", "g.n": float64(1)}},
				{"hclog warn line", "WARN", map[string]any{"job": "j-log"}},
				{"own hclog error line of j-log", "ERROR", nil},
				{"slog debug line", "DEBUG", map[string]any{"job": "j-log"}},
			}
			for _, w := range want {
				got := find(w.msg)
				if w.level == "DEBUG" && level > slog.LevelDebug {
					assert.Empty(t, got, "%q is below the agent's level", w.msg)
					continue
				}
				require.Len(t, got, 1, "%q logged once", w.msg)
				assert.Equal(t, w.level, got[0]["level"], w.msg)
				assert.Equal(t, "noop", got[0]["plugin"], w.msg)
				for k, v := range w.fields {
					assert.Equal(t, v, got[0][k], "%s: field %s", w.msg, k)
				}
			}
		})
	}
}
