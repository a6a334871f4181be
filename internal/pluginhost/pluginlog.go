package pluginhost

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// hostLogLevel is the plugin.LogLevelEnv value for a host logging to log:
// the lowest level log keeps. A plugin sends nothing below it.
func hostLogLevel(log *slog.Logger) string {
	for _, l := range []struct {
		level slog.Level
		name  string
	}{{slog.LevelDebug, "debug"}, {slog.LevelInfo, "info"}, {slog.LevelWarn, "warn"}} {
		if log.Enabled(context.Background(), l.level) {
			return l.name
		}
	}
	return "error"
}

// hostEnv is env with what the host tells every plugin process: its log
// level (plugin.LogLevelEnv) and what it is (plugin.HostEnv).
func hostEnv(env []string, log *slog.Logger, version string) []string {
	info, _ := json.Marshal(plugin.HostInfo{Version: version, Protocol: plugin.ProtocolVersion, Features: plugin.HostFeatures()})
	return append(append([]string(nil), env...), plugin.LogLevelEnv+"="+hostLogLevel(log), plugin.HostEnv+"="+string(info))
}

// newHostLogger is go-plugin's logger on the host side of one plugin. It
// receives what the plugin process logged (parsed by go-plugin from the
// process's stderr) and its own messages, as hclog JSON lines that
// logPluginLine turns into records of log.
//
// It passes every level: go-plugin hands on a line of text at debug, whose
// own level logPluginLine reads, and log drops what is below its level.
func newHostLogger(log *slog.Logger) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Level:      hclog.Trace,
		JSONFormat: true,
		Output:     &lineWriter{fn: func(line string) { logPluginLine(log, line) }},
	})
}

// hclogText matches a line an hclog logger in text format wrote: a
// timestamp, then its level. go-plugin passes such lines on at debug; the
// level in them is the plugin's.
var hclogText = regexp.MustCompile(`^\S+ \[(TRACE|DEBUG|INFO|WARN|ERROR)\]\s+(.*)$`)

// logPluginLine writes one hclog JSON line to log at its level, with its
// fields. Lines that are not JSON pass through at info, as before.
func logPluginLine(log *slog.Logger, line string) {
	var entry map[string]any
	if err := json.Unmarshal([]byte(line), &entry); err != nil {
		level, msg := hclogLevel(line)
		log.Log(context.Background(), level, msg)
		return
	}
	msg, _ := entry["@message"].(string)
	lvl, _ := entry["@level"].(string)
	level := slogLevel(hclog.LevelFromString(lvl))
	if m := hclogText.FindStringSubmatch(msg); m != nil && level == slog.LevelDebug {
		level, msg = slogLevel(hclog.LevelFromString(m[1])), m[2]
	}
	if closingNoise(msg) {
		level = slog.LevelDebug
	}
	attrs := make([]slog.Attr, 0, len(entry))
	for _, k := range slices.Sorted(maps.Keys(entry)) {
		if !strings.HasPrefix(k, "@") && k != "timestamp" {
			attrs = append(attrs, slog.Any(k, entry[k]))
		}
	}
	log.LogAttrs(context.Background(), level, msg, attrs...)
}

// slogLevels maps hclog levels to slog's. Any other (trace, debug) is debug.
var slogLevels = map[hclog.Level]slog.Level{
	hclog.Error:   slog.LevelError,
	hclog.Warn:    slog.LevelWarn,
	hclog.Info:    slog.LevelInfo,
	hclog.NoLevel: slog.LevelInfo,
}

// slogLevel maps an hclog level to slog's. Trace is debug.
func slogLevel(l hclog.Level) slog.Level {
	if level, ok := slogLevels[l]; ok {
		return level
	}
	return slog.LevelDebug
}
