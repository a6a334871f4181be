package pluginhost

import (
	"log/slog"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
)

func TestHclogLevel(t *testing.T) {
	for _, tc := range []struct {
		line  string
		level slog.Level
		msg   string
	}{
		{"[ERROR] boom", slog.LevelError, "boom"},
		{"[WARN]  careful ", slog.LevelWarn, "careful"},
		{"[INFO] hello", slog.LevelInfo, "hello"},
		{"[DEBUG] detail", slog.LevelDebug, "detail"},
		{"[TRACE] more", slog.LevelDebug, "more"},
		{"[ERROR] yamux: keepalive failed: session shutdown", slog.LevelDebug, "yamux: keepalive failed: session shutdown"},
		{"[FATAL] x", slog.LevelInfo, "[FATAL] x"},
		{"plain text", slog.LevelInfo, "plain text"},
		{" [ERROR] not at the start", slog.LevelInfo, " [ERROR] not at the start"},
	} {
		level, msg := hclogLevel(tc.line)
		assert.Equal(t, tc.level, level, tc.line)
		assert.Equal(t, tc.msg, msg, tc.line)
	}
}

func TestSlogLevel(t *testing.T) {
	for l, want := range map[hclog.Level]slog.Level{
		hclog.Error: slog.LevelError, hclog.Warn: slog.LevelWarn, hclog.Info: slog.LevelInfo,
		hclog.NoLevel: slog.LevelInfo, hclog.Debug: slog.LevelDebug, hclog.Trace: slog.LevelDebug,
		hclog.Off: slog.LevelDebug,
	} {
		assert.Equal(t, want, slogLevel(l), l.String())
	}
}

func TestClosingNoise(t *testing.T) {
	assert.True(t, closingNoise("yamux: Failed to read header: EOF"))
	assert.True(t, closingNoise("[ERR] yamux: broken pipe"))
	assert.False(t, closingNoise("yamux: something else"))
	assert.False(t, closingNoise("EOF"))
}
