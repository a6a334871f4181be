package settings_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
	"github.com/tetherjobs/tether/pkg/plugin/settings"
)

var dec = settings.Decoder{Prefix: "test: "}

// requireRefused asserts err is a permanent *plugin.Error with exactly want
// as its message.
func requireRefused(t *testing.T, err error, want string) {
	t.Helper()
	require.Error(t, err)
	var pe *plugin.Error
	require.True(t, errors.As(err, &pe), "want a *plugin.Error, got %T", err)
	assert.Equal(t, plugin.Permanent, pe.Class)
	assert.Equal(t, want, pe.Message)
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func TestErrorf(t *testing.T) {
	requireRefused(t, dec.Errorf("x: %d%% done", 50), "test: x: 50% done")
	// A prefix is text, never a format.
	requireRefused(t, settings.Decoder{Prefix: "p%d: "}.Errorf("x"), "p%d: x")
	requireRefused(t, settings.Decoder{}.Errorf("x"), "x")
}

func TestObject(t *testing.T) {
	known := []string{"a", "b"}
	for _, in := range []string{``, `  `, `null`, `{}`} {
		f, err := dec.Object("config", raw(in), known)
		require.NoError(t, err, "input %q", in)
		assert.Empty(t, f, "input %q", in)
	}

	f, err := dec.Object("config", raw(`{"b": 1, "a": null}`), known)
	require.NoError(t, err)
	assert.Equal(t, settings.Fields{"a": raw("null"), "b": raw("1")}, f, "nulls are kept for Merge")
	assert.Equal(t, []string{"b"}, f.Keys(), "Keys skips nulls")
	_, ok := f.Get("a")
	assert.False(t, ok, "a null is unset")
	v, ok := f.Get("b")
	assert.True(t, ok)
	assert.Equal(t, raw("1"), v)
	_, ok = f.Get("c")
	assert.False(t, ok)

	for _, tc := range []struct{ in, want string }{
		{`[1]`, `test: config: must be a mapping, got array`},
		{`"x"`, `test: config: must be a mapping, got string`},
		{`{"b": 1, "zz": 2, "c": 3}`, `test: config: unknown key "c"; known keys are a, b`},
		{`{"a": `, `test: config: unexpected end of JSON input`},
	} {
		_, err := dec.Object("config", raw(tc.in), known)
		requireRefused(t, err, tc.want)
	}
}

func TestFieldsKeysSorted(t *testing.T) {
	f := settings.Fields{"c": raw(`1`), "a": raw(`2`), "b": raw(`3`)}
	assert.Equal(t, []string{"a", "b", "c"}, f.Keys())
}

func TestMerge(t *testing.T) {
	known := []string{"image", "labels", "driver", "timeout", "extra"}
	cfg, err := dec.Object("config", raw(`{
		"image": "cfg", "timeout": "1h", "extra": "cfg",
		"labels": {"team": "data", "env": "prod"},
		"driver": {"cores": 1, "memory": "1g", "labels": {"a": "1", "b": "1"}}}`), known)
	require.NoError(t, err)
	ctx, err := dec.Object("context", raw(`{
		"image": "ctx", "timeout": null,
		"labels": {"env": "dev", "team": null},
		"driver": {"memory": "2g", "labels": {"b": "2"}}}`), known)
	require.NoError(t, err)

	m, err := dec.Merge(cfg, ctx, "labels", "driver", "driver.labels")
	require.NoError(t, err)
	assert.Equal(t, []string{"driver", "extra", "image", "labels"}, m.Keys(), "a null in the context unsets the config's timeout")
	assert.Len(t, m, 4, "the result holds no nulls")
	assert.JSONEq(t, `"ctx"`, string(m["image"]), "the context replaces")
	assert.JSONEq(t, `"cfg"`, string(m["extra"]), "the config stays where the context is silent")

	labels, err := dec.StringMap("labels", m["labels"])
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"env": "dev"}, labels, "merged key by key; a null inside removes the key")

	assert.JSONEq(t, `{"cores": 1, "memory": "2g", "labels": {"a": "1", "b": "2"}}`, string(m["driver"]))

	// Without "driver.labels", the context's driver.labels replaces the config's.
	m, err = dec.Merge(cfg, ctx, "labels", "driver")
	require.NoError(t, err)
	assert.JSONEq(t, `{"cores": 1, "memory": "2g", "labels": {"b": "2"}}`, string(m["driver"]))

	// Without any merged keys, every key is replaced.
	m, err = dec.Merge(cfg, ctx)
	require.NoError(t, err)
	assert.JSONEq(t, `{"env": "dev", "team": null}`, string(m["labels"]))

	// A context null unsets a merged key too.
	m, err = dec.Merge(cfg, settings.Fields{"labels": raw(`null`)}, "labels")
	require.NoError(t, err)
	_, ok := m["labels"]
	assert.False(t, ok)

	// A context mapping over a config null starts from nothing.
	m, err = dec.Merge(settings.Fields{"labels": raw(`null`)}, settings.Fields{"labels": raw(`{"a": "1"}`)}, "labels")
	require.NoError(t, err)
	assert.JSONEq(t, `{"a": "1"}`, string(m["labels"]))
}

func TestMergeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg, ctx settings.Fields
		want     string
	}{
		{"context not a mapping", settings.Fields{"labels": raw(`{"a": "1"}`)}, settings.Fields{"labels": raw(`"x"`)}, `test: labels: must be a mapping, got string`},
		{"config not a mapping", settings.Fields{"labels": raw(`[1]`)}, settings.Fields{}, `test: labels: must be a mapping, got array`},
		{"nested not a mapping", settings.Fields{"driver": raw(`{"labels": "x"}`)}, settings.Fields{"driver": raw(`{"labels": {"a": "1"}}`)}, `test: driver.labels: must be a mapping, got string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dec.Merge(tc.cfg, tc.ctx, "labels", "driver", "driver.labels")
			requireRefused(t, err, tc.want)
		})
	}
}

func TestString(t *testing.T) {
	s, err := dec.String("image", raw(`"spark:1"`))
	require.NoError(t, err)
	assert.Equal(t, "spark:1", s)

	_, err = dec.String("image", raw(`1`))
	requireRefused(t, err, `test: image: must be a string, got number`)
	_, err = dec.String("image", raw(`" \t"`))
	requireRefused(t, err, `test: image: must not be empty`)
}

func TestOneOf(t *testing.T) {
	s, err := dec.OneOf("mode", raw(`"client"`), "cluster", "client")
	require.NoError(t, err)
	assert.Equal(t, "client", s)

	_, err = dec.OneOf("mode", raw(`"local"`), "cluster", "client")
	requireRefused(t, err, `test: mode: must be one of cluster, client, got "local"`)
	_, err = dec.OneOf("mode", raw(`true`), "cluster", "client")
	requireRefused(t, err, `test: mode: must be a string, got boolean`)
}

func TestStrings(t *testing.T) {
	l, err := dec.Strings("args", raw(`["a", ""]`), true)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", ""}, l)

	l, err = dec.Strings("args", raw(`[]`), false)
	require.NoError(t, err)
	assert.NotNil(t, l, "an empty list is set, not nil")
	assert.Empty(t, l)

	_, err = dec.Strings("args", raw(`["a", ""]`), false)
	requireRefused(t, err, `test: args[1]: must not be empty`)
	_, err = dec.Strings("args", raw(`["a", 1]`), true)
	requireRefused(t, err, `test: args[1]: must be a string, got number`)
	_, err = dec.Strings("args", raw(`["a", 1]`), false)
	requireRefused(t, err, `test: args[1]: must be a string, got number`)
	_, err = dec.Strings("args", raw(`"--x"`), true)
	requireRefused(t, err, `test: args: must be a list of strings, got string`)
}

func TestStringMap(t *testing.T) {
	m, err := dec.StringMap("tags", raw(`{"a": "1", "b": "", "c": null}`))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "1", "b": ""}, m)

	_, err = dec.StringMap("tags", raw(`["a"]`))
	requireRefused(t, err, `test: tags: must be a mapping of strings, got array`)
	// Sorted, so the first bad key is always the one named.
	_, err = dec.StringMap("tags", raw(`{"z": 1, "b": true, "a": "ok"}`))
	requireRefused(t, err, `test: tags.b: must be a string, got boolean`)
}

func TestInt(t *testing.T) {
	n, err := dec.Int("cores", raw(`4`), 1, 8)
	require.NoError(t, err)
	assert.Equal(t, 4, n)

	for _, tc := range []struct{ in, want string }{
		{`0`, `test: cores: must be between 1 and 8, got 0`},
		{`9`, `test: cores: must be between 1 and 8, got 9`},
		{`1.5`, `test: cores: must be a whole number, got 1.5`},
		{`"2"`, `test: cores: must be a whole number, got "2"`},
	} {
		_, err := dec.Int("cores", raw(tc.in), 1, 8)
		requireRefused(t, err, tc.want)
	}
}

func TestBool(t *testing.T) {
	b, err := dec.Bool("in_cluster", raw(`true`))
	require.NoError(t, err)
	assert.True(t, b)
	b, err = dec.Bool("in_cluster", raw(`false`))
	require.NoError(t, err)
	assert.False(t, b)

	_, err = dec.Bool("in_cluster", raw(`"yes"`))
	requireRefused(t, err, `test: in_cluster: must be true or false, got string`)
}

func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		in     string
		zeroOK bool
		want   time.Duration
	}{
		{`"30s"`, false, 30 * time.Second},
		{`"1h30m"`, false, 90 * time.Minute},
		{`"0"`, true, 0},
		{`"0s"`, true, 0},
	} {
		d, err := dec.Duration("timeout", raw(tc.in), tc.zeroOK)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, d, tc.in)
	}

	for _, tc := range []struct {
		in     string
		zeroOK bool
		want   string
	}{
		{`"0"`, false, `test: timeout: must be positive, got "0"`},
		{`"0s"`, false, `test: timeout: must be positive, got "0s"`},
		{`"-1s"`, true, `test: timeout: must be a non-negative duration like "30s", got "-1s"`},
		{`"soon"`, true, `test: timeout: must be a non-negative duration like "30s", got "soon"`},
		{`30`, true, `test: timeout: must be a duration string like "30s", got 30`},
		{`""`, true, `test: timeout: must be a duration string like "30s", got ""`},
	} {
		_, err := dec.Duration("timeout", raw(tc.in), tc.zeroOK)
		requireRefused(t, err, tc.want)
	}
}

func TestKindAndIsNull(t *testing.T) {
	for in, want := range map[string]string{
		``: "nothing", ` `: "nothing", `{}`: "object", ` [1]`: "array", `"x"`: "string",
		`true`: "boolean", `false`: "boolean", `null`: "null", `-1`: "number", `2.5`: "number",
	} {
		assert.Equal(t, want, settings.Kind(raw(in)), "Kind(%q)", in)
	}
	assert.True(t, settings.IsNull(raw(` null `)))
	assert.False(t, settings.IsNull(raw(`"null"`)))
	assert.False(t, settings.IsNull(nil))
}
