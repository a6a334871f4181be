// Package settings decodes a plugin's settings strictly. They are the
// plugin's section of the agent config (plugin.Job.Config) and the job's
// context (plugin.Job.Context), both JSON objects.
//
// The rules it keeps, so every plugin keeps them the same way:
//
//   - A key the plugin does not know is refused, naming the key and listing
//     the known ones. A typo must fail the job, not be ignored.
//   - A null value is an unset key. Fields.Keys and Fields.Get skip nulls.
//     Merge lets a null in the context unset the config's key.
//   - Every error names the setting it is about ("driver.cores: must be
//     between 1 and 1024, got 0"), starts with the Decoder's Prefix, and is
//     plugin.Permanent. The same input fails the same way on every retry.
//
// A plugin typically merges config and context, then decodes key by key:
//
//	var dec = settings.Decoder{Prefix: "myplugin: "}
//
//	cfg, err := dec.Object("config", job.Config, keys)
//	...
//	ctx, err := dec.Object("context", job.Context, keys)
//	...
//	merged, err := dec.Merge(cfg, ctx, "labels")
//	...
//	for _, key := range merged.Keys() {
//		v, _ := merged.Get(key)
//		switch key {
//		case "image":
//			c.Image, err = dec.String(key, v)
//		case "timeout":
//			c.Timeout, err = dec.Duration(key, v, true)
//		}
//		...
//	}
package settings

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// Decoder decodes one plugin's settings. Its zero value is ready to use.
// A Decoder is never modified, so one value can serve a whole plugin.
type Decoder struct {
	// Prefix starts every error message, e.g. "ecs: ", so a job's error
	// says which plugin refused its settings.
	Prefix string
}

// Errorf returns a plugin.Permanent error whose message is d.Prefix followed
// by the formatted text. Plugins use it for their own checks, so those read
// like the Decoder's.
func (d Decoder) Errorf(format string, args ...any) error {
	return plugin.Errorf(plugin.Permanent, "%s%s", d.Prefix, fmt.Sprintf(format, args...))
}

// Fields are the top-level values of a JSON object, by key, as Object
// returns them. Null values are kept, so that Merge can tell "unset this
// key" from "not mentioned". Keys and Get treat them as absent.
type Fields map[string]json.RawMessage

// Keys returns the keys whose values are not null, sorted, so that a
// plugin decoding them in this order reports the same error every time.
func (f Fields) Keys() []string {
	keys := slices.AppendSeq(make([]string, 0, len(f)), maps.Keys(f))
	slices.Sort(keys)
	return slices.DeleteFunc(keys, func(k string) bool { return IsNull(f[k]) })
}

// Get returns key's value and whether it is set: present and not null.
func (f Fields) Get(key string) (json.RawMessage, bool) {
	v, ok := f[key]
	if !ok || IsNull(v) {
		return nil, false
	}
	return v, true
}

// Object splits the JSON object raw into its top-level fields, refusing
// keys not in known. Empty input and null are an empty object. what names
// raw in errors: "config", "context", or a setting such as "driver".
func (d Decoder) Object(what string, raw json.RawMessage, known []string) (Fields, error) {
	if unset(raw) {
		return Fields{}, nil
	}
	if kind := Kind(raw); kind != "object" {
		return nil, d.Errorf("%s: must be a mapping, got %s", what, kind)
	}
	var fields Fields
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, d.Errorf("%s: %v", what, err)
	}
	keys := slices.Sorted(maps.Keys(fields))
	if i := slices.IndexFunc(keys, func(k string) bool { return !slices.Contains(known, k) }); i >= 0 {
		return nil, d.Errorf("%s: unknown key %q; known keys are %s", what, keys[i], strings.Join(known, ", "))
	}
	return fields, nil
}

// Merge lays context over config. A context key replaces the config's, and
// a null in the context unsets it. Keys named in merged are mappings merged
// key by key instead (config, then context; the context wins, and a null
// value inside removes that key). A dotted name merges a mapping inside one
// of them the same way: "driver.labels" with "driver". The result holds no
// nulls.
func (d Decoder) Merge(config, context Fields, merged ...string) (Fields, error) {
	out := Fields{}
	for _, src := range []Fields{config, context} {
		for _, k := range slices.Sorted(maps.Keys(src)) {
			v := src[k]
			if !slices.Contains(merged, k) || IsNull(v) {
				out[k] = v
				continue
			}
			m, err := d.mergeObjects(k, out[k], v, merged)
			if err != nil {
				return nil, err
			}
			out[k] = m
		}
	}
	maps.DeleteFunc(out, func(_ string, v json.RawMessage) bool { return IsNull(v) })
	return out, nil
}

// mergeObjects lays over's keys over base's. path is the setting's name.
func (d Decoder) mergeObjects(path string, base, over json.RawMessage, merged []string) (json.RawMessage, error) {
	b := map[string]json.RawMessage{}
	if !unset(base) && !decodeAs(base, "object", &b) {
		return nil, d.Errorf("%s: must be a mapping, got %s", path, Kind(base))
	}
	var o map[string]json.RawMessage
	if !decodeAs(over, "object", &o) {
		return nil, d.Errorf("%s: must be a mapping, got %s", path, Kind(over))
	}
	for _, k := range slices.Sorted(maps.Keys(o)) {
		v := o[k]
		if p := path + "." + k; slices.Contains(merged, p) && !IsNull(v) && b[k] != nil {
			m, err := d.mergeObjects(p, b[k], v, merged)
			if err != nil {
				return nil, err
			}
			b[k] = m
			continue
		}
		b[k] = v
	}
	out, err := json.Marshal(b)
	if err != nil {
		return nil, d.Errorf("%s: %v", path, err)
	}
	return out, nil
}

// String reads a string that is not empty or only white space.
func (d Decoder) String(what string, v json.RawMessage) (string, error) {
	var s string
	if !decodeAs(v, "string", &s) {
		return "", d.Errorf("%s: must be a string, got %s", what, Kind(v))
	}
	if strings.TrimSpace(s) == "" {
		return "", d.Errorf("%s: must not be empty", what)
	}
	return s, nil
}

// OneOf reads a string that is one of allowed.
func (d Decoder) OneOf(what string, v json.RawMessage, allowed ...string) (string, error) {
	s, err := d.String(what, v)
	if err != nil {
		return "", err
	}
	if !slices.Contains(allowed, s) {
		return "", d.Errorf("%s: must be one of %s, got %q", what, strings.Join(allowed, ", "), s)
	}
	return s, nil
}

// Strings reads a list of strings. Unless blankOK, every item must be a
// String (not empty or only white space). An empty list gives an empty,
// non-nil slice.
func (d Decoder) Strings(what string, v json.RawMessage, blankOK bool) ([]string, error) {
	var items []json.RawMessage
	if !decodeAs(v, "array", &items) {
		return nil, d.Errorf("%s: must be a list of strings, got %s", what, Kind(v))
	}
	out := make([]string, len(items))
	for i, item := range items {
		name := fmt.Sprintf("%s[%d]", what, i)
		if !decodeAs(item, "string", &out[i]) {
			return nil, d.Errorf("%s: must be a string, got %s", name, Kind(item))
		}
		if !blankOK && strings.TrimSpace(out[i]) == "" {
			return nil, d.Errorf("%s: must not be empty", name)
		}
	}
	return out, nil
}

// StringMap reads a mapping of strings (any string, empty too). A null
// value is an unset key and is left out, as Merge leaves it to do.
func (d Decoder) StringMap(what string, v json.RawMessage) (map[string]string, error) {
	var m map[string]json.RawMessage
	if !decodeAs(v, "object", &m) {
		return nil, d.Errorf("%s: must be a mapping of strings, got %s", what, Kind(v))
	}
	out := make(map[string]string, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		val := m[k]
		if IsNull(val) {
			continue
		}
		var s string
		if !decodeAs(val, "string", &s) {
			return nil, d.Errorf("%s.%s: must be a string, got %s", what, k, Kind(val))
		}
		out[k] = s
	}
	return out, nil
}

// Int reads a whole number from lo to hi, inclusive.
func (d Decoder) Int(what string, v json.RawMessage, lo, hi int) (int, error) {
	var n int
	if !decodeAs(v, "number", &n) {
		return 0, d.Errorf("%s: must be a whole number, got %s", what, v)
	}
	if n < lo || n > hi {
		return 0, d.Errorf("%s: must be between %d and %d, got %d", what, lo, hi, n)
	}
	return n, nil
}

// Bool reads true or false.
func (d Decoder) Bool(what string, v json.RawMessage) (bool, error) {
	var b bool
	if !decodeAs(v, "boolean", &b) {
		return false, d.Errorf("%s: must be true or false, got %s", what, Kind(v))
	}
	return b, nil
}

// Duration reads a Go duration string such as "30s" or "1h30m". "0" is
// zero. Negative durations are refused, and so is zero unless zeroOK (for
// settings where 0 means "off", such as a timeout).
func (d Decoder) Duration(what string, v json.RawMessage, zeroOK bool) (time.Duration, error) {
	s, err := d.String(what, v)
	if err != nil {
		return 0, d.Errorf("%s: must be a duration string like \"30s\", got %s", what, v)
	}
	dur, err := time.ParseDuration(s) // "0" needs no unit
	if err != nil || dur < 0 {
		return 0, d.Errorf("%s: must be a non-negative duration like \"30s\", got %q", what, s)
	}
	if dur == 0 && !zeroOK {
		return 0, d.Errorf("%s: must be positive, got %q", what, s)
	}
	return dur, nil
}

// IsNull reports whether v is the JSON null.
func IsNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

// unset reports whether v is empty input or the JSON null: no value.
func unset(v json.RawMessage) bool {
	return slices.Contains([]string{"", "null"}, string(bytes.TrimSpace(v)))
}

// decodeAs decodes v into dst if v is of JSON type kind (see Kind). A null
// would decode into any dst, so the type is checked first.
func decodeAs(v json.RawMessage, kind string, dst any) bool {
	return Kind(v) == kind && json.Unmarshal(v, dst) == nil
}

// kinds names the JSON type each first byte of a value starts. Any other is
// a number's.
var kinds = map[byte]string{
	'{': "object", '[': "array", '"': "string", 't': "boolean", 'f': "boolean", 'n': "null",
}

// Kind names the JSON type of v for error messages: "object", "array",
// "string", "number", "boolean", "null", or "nothing" for empty input. It
// looks only at the first byte. v is assumed to be valid JSON.
func Kind(v json.RawMessage) string {
	t := bytes.TrimSpace(v)
	if len(t) == 0 {
		return "nothing"
	}
	return cmp.Or(kinds[t[0]], "number")
}

// Problem turns an error of this Decoder (or of a plugin's own check written
// with Errorf) into a plugin.Problem for Validate, so that Validate reports
// exactly what Execute would fail with. The setting's name that starts the
// message ("task_count: must be ...") becomes the Field. A leading "config"
// or "context" section name is dropped, since the Problem's Command already
// says which section it is. A message that names no setting is kept whole.
func (d Decoder) Problem(command string, err error) plugin.Problem {
	msg := strings.TrimPrefix(err.Error(), d.Prefix)
	field, rest, ok := strings.Cut(msg, ": ")
	if !ok || field == "" || strings.ContainsAny(field, " \t\n\"'") {
		return plugin.Problem{Command: command, Message: msg}
	}
	for _, section := range []string{"config", "context"} {
		// The dot appended makes the section alone ("config") a prefix too.
		if f, ok := strings.CutPrefix(field+".", section+"."); ok {
			field = strings.TrimSuffix(f, ".")
		}
	}
	return plugin.Problem{Command: command, Field: field, Message: rest}
}

// Validate is a plugin.Validator's work for a plugin that merges its config
// with each job's context (as Merge does). decode is the plugin's own
// parsing of a config and a context, without the checks for what a job may
// still bring. Each command's default context is decoded over the config. A
// failure the config alone also has is reported once, against the config.
// Any other is reported against the command. A config that fails alone but
// works under every command's context is fine. No job runs with the config
// alone. With no commands the config alone is checked, unless it is empty (a
// plugin found in the plugin directory but neither configured nor used).
func (d Decoder) Validate(config json.RawMessage, contexts map[string]json.RawMessage, decode func(config, context json.RawMessage) error) []plugin.Problem {
	cfgErr := decode(config, nil)
	if len(contexts) == 0 {
		if cfgErr != nil && !unset(config) {
			return []plugin.Problem{d.Problem("", cfgErr)}
		}
		return nil
	}
	var problems []plugin.Problem
	configReported := false
	for _, name := range slices.Sorted(maps.Keys(contexts)) {
		err := decode(config, contexts[name])
		switch {
		case err == nil:
		case cfgErr != nil && err.Error() == cfgErr.Error():
			if !configReported {
				configReported = true
				problems = append(problems, d.Problem("", err))
			}
		default:
			problems = append(problems, d.Problem(name, err))
		}
	}
	return problems
}
