package config

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// TokensEnv holds API tokens as "name:token,name2:token2". It replaces
// http.tokens.
const TokensEnv = "TETHER_API_TOKENS"

// EnvVar is one scalar key and the environment variable that overrides it.
type EnvVar struct {
	Key string // YAML path, e.g. "agent.keepalive"
	Env string // e.g. "TETHER_AGENT_KEEPALIVE"
}

// EnvVars lists every environment override, in declaration order. Each
// scalar key <section>.<key> is overridden by TETHER_<SECTION>_<KEY>.
// database_url by DATABASE_URL. http.tokens by TETHER_API_TOKENS. A list of
// strings (http.allowed_hosts) is comma-separated.
func EnvVars() []EnvVar {
	var out []EnvVar
	eachScalar(reflect.ValueOf(Default()).Elem(), "", func(key, env string, _ reflect.Value, _ reflect.StructField) {
		out = append(out, EnvVar{Key: key, Env: env})
	})
	return append(out, EnvVar{Key: "http.tokens", Env: TokensEnv})
}

// eachScalar calls fn for every string, integer, Duration and list-of-string
// field reached through structs only (none inside maps or lists), with its
// YAML path and env name.
func eachScalar(v reflect.Value, path string, fn func(key, env string, field reflect.Value, f reflect.StructField)) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name := yamlName(f)
		envTag := f.Tag.Get("env")
		if name == "" || envTag == "-" {
			continue
		}
		key := joinPath(path, name)
		fv := v.Field(i)
		switch {
		case f.Type == durationType, f.Type.Kind() == reflect.String,
			f.Type.Kind() == reflect.Int, f.Type.Kind() == reflect.Int64,
			f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.String:
			fn(key, cmp.Or(envTag, "TETHER_"+strings.ToUpper(strings.ReplaceAll(key, ".", "_"))), fv, f)
		case f.Type.Kind() == reflect.Struct:
			eachScalar(fv, key, fn)
		}
	}
}

// applyEnv overrides scalar keys from the environment. An empty variable
// counts as unset. Every malformed value is reported, naming the variable.
// The value of a secret one is never named.
func applyEnv(cfg *Config, getenv func(string) string) error {
	var errs []error
	eachScalar(reflect.ValueOf(cfg).Elem(), "", func(key, env string, fv reflect.Value, f reflect.StructField) {
		raw := getenv(env)
		if raw == "" {
			return
		}
		if err := setScalar(fv, raw, f); err != nil {
			errs = append(errs, fmt.Errorf("%s (overrides %s): %w", env, key, err))
		}
	})
	if raw := getenv(TokensEnv); raw != "" {
		tokens, err := ParseTokens(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", TokensEnv, err))
		} else {
			cfg.HTTP.Tokens = tokens
		}
	}
	return errors.Join(errs...)
}

// setScalar sets a field from its environment variable. Strings and lists
// are trimmed (a value read from a file often ends in a newline). Numbers
// and durations must be exact, as in the file.
func setScalar(fv reflect.Value, raw string, f reflect.StructField) error {
	switch {
	case fv.Type() == durationType:
		if strings.TrimSpace(raw) != raw {
			return fmt.Errorf("%q has leading or trailing spaces; remove them", raw)
		}
		d, err := ParseDuration(raw)
		if err != nil {
			return err
		}
		fv.SetInt(int64(d))
	case fv.Kind() == reflect.String:
		fv.SetString(strings.TrimSpace(raw))
	case fv.Kind() == reflect.Slice:
		var list []string
		for item := range strings.SplitSeq(raw, ",") {
			if item = strings.TrimSpace(item); item != "" {
				list = append(list, item)
			}
		}
		fv.Set(reflect.ValueOf(list))
	case fv.Kind() == reflect.Int, fv.Kind() == reflect.Int64:
		if err := checkInt(raw, fv.Type().Bits(), f.Tag.Get("max")); err != nil {
			return err
		}
		n, _ := strconv.ParseInt(raw, 10, 64) // checked above
		fv.SetInt(n)
	}
	return nil
}

// ParseTokens parses "name:token,name2:token2".
func ParseTokens(raw string) ([]Token, error) {
	var out []Token
	for i, part := range strings.Split(raw, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, token, _ := strings.Cut(part, ":") // no colon leaves token empty
		if name == "" || token == "" {
			return nil, fmt.Errorf("entry %d: want name:token", i+1)
		}
		out = append(out, Token{Name: name, Token: token})
	}
	return out, nil
}

// SecretEnv reports the agent's own secrets and settings, which no plugin
// may see: DATABASE_URL, every PG* variable (libpq's and pgx's connection
// settings — PGPASSWORD, PGSSLPASSWORD, PGPASSFILE, PGSERVICEFILE, PGSSLKEY,
// PGHOST and the rest: they are the agent's database) and every TETHER_*
// variable (API tokens among them). The plugin host scrubs them from every
// plugin's environment, whatever pass_env says. CheckPassEnv refuses
// pass_env entries that name only them.
func SecretEnv(name string) bool { return name == "DATABASE_URL" || secretPrefix(name) }

// secretPrefix reports whether every variable a NAME* pattern with this
// prefix selects is a secret (SecretEnv), so the pattern can only be a
// mistake.
func secretPrefix(prefix string) bool {
	return strings.HasPrefix(prefix, "PG") || strings.HasPrefix(prefix, "TETHER_")
}

// CheckPassEnv says why pattern may not be a pass_env entry, or returns nil.
// An entry is a variable name, a NAME* prefix or "*". Naming a secret
// (SecretEnv) is refused, and so is a prefix that selects nothing but
// secrets ("PG*", "TETHER_*"). A wider pattern ("*", "P*") is allowed and
// the secrets it covers are scrubbed. The agent's validation and the plugin
// host both apply it.
func CheckPassEnv(pattern string) error {
	if !envNameRe.MatchString(pattern) {
		return fmt.Errorf("%q is not a variable name, NAME* prefix or *", pattern)
	}
	prefix, wildcard := strings.CutSuffix(pattern, "*")
	switch {
	case !wildcard && SecretEnv(pattern):
		return fmt.Errorf("%s is never passed to plugins: DATABASE_URL, PG* and TETHER_* are the agent's own database settings and secrets; give the plugin what it needs under another name in plugins.<name>.env", pattern)
	case wildcard && secretPrefix(prefix):
		return fmt.Errorf("%s is never passed to plugins: it selects only the agent's own settings (DATABASE_URL, PG* and TETHER_* are the agent's database settings and secrets); remove it, and give the plugin what it needs under another name in plugins.<name>.env", pattern)
	}
	return nil
}
