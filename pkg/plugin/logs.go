package plugin

import (
	"context"
	"io"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// LogLevelEnv names the variable by which the host tells a plugin process
// the lowest level the agent's log keeps: trace, debug, info, warn or
// error. Lines below it are not sent.
const LogLevelEnv = "TETHER_PLUGIN_LOG_LEVEL"

// newPluginLogger is the plugin process's logger. It writes hclog JSON to w
// (the process's real stderr), which go-plugin's host parses into the
// agent's log at each line's level, with its fields.
func newPluginLogger(level string, w io.Writer) hclog.Logger {
	l := hclog.LevelFromString(level)
	if l == hclog.NoLevel {
		l = hclog.Info
	}
	return hclog.New(&hclog.LoggerOptions{Level: l, JSONFormat: true, Output: w})
}

// routeLogs sends the process's standard loggers to l: hclog's default,
// slog's default and, through slog, the log package. Without it they write
// plain text to stderr, which the host logs at debug at best.
func routeLogs(l hclog.Logger) {
	hclog.SetDefault(l)
	slog.SetDefault(slog.New(&hclogHandler{l: l}))
}

// hclogHandler is a slog.Handler that writes to an hclog.Logger.
type hclogHandler struct {
	l      hclog.Logger
	attrs  []any // key, value pairs, keys qualified by their groups
	prefix string
}

func (h *hclogHandler) Enabled(_ context.Context, level slog.Level) bool {
	return h.l.GetLevel() <= toHCLog(level)
}

func (h *hclogHandler) Handle(_ context.Context, r slog.Record) error {
	kv := append([]any(nil), h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		kv = appendAttr(kv, h.prefix, a)
		return true
	})
	h.l.Log(toHCLog(r.Level), r.Message, kv...)
	return nil
}

func (h *hclogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]any(nil), h.attrs...)
	for _, a := range as {
		c.attrs = appendAttr(c.attrs, h.prefix, a)
	}
	return &c
}

func (h *hclogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix = h.prefix + name + "."
	return &c
}

// appendAttr appends a as key, value pairs, a group's members with the
// group's name before theirs.
func appendAttr(kv []any, prefix string, a slog.Attr) []any {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range v.Group() {
			kv = appendAttr(kv, p, g)
		}
		return kv
	}
	if a.Key == "" {
		return kv
	}
	return append(kv, prefix+a.Key, v.Any())
}

// hclogLevels are slog's named levels, highest first, with hclog's.
var hclogLevels = []struct {
	slog slog.Level
	hc   hclog.Level
}{
	{slog.LevelError, hclog.Error},
	{slog.LevelWarn, hclog.Warn},
	{slog.LevelInfo, hclog.Info},
	{slog.LevelDebug, hclog.Debug},
}

// toHCLog maps a slog level to hclog's. Levels between slog's named ones
// round down. Below LevelDebug is Trace.
func toHCLog(l slog.Level) hclog.Level {
	for _, m := range hclogLevels {
		if l >= m.slog {
			return m.hc
		}
	}
	return hclog.Trace
}
