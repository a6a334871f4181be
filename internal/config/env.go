package config

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// TokensEnv holds API tokens as "name:token,name2:token2"; it replaces
// http.tokens.
const TokensEnv = "TETHER_API_TOKENS"

// EnvVar is one scalar key and the environment variable that overrides it.
type EnvVar struct {
	Key string // YAML path, e.g. "agent.keepalive"
	Env string // e.g. "TETHER_AGENT_KEEPALIVE"
}

// EnvVars lists every environment override, in declaration order. Each
// scalar key <section>.<key> is overridden by TETHER_<SECTION>_<KEY>;
// database_url by DATABASE_URL; http.tokens by TETHER_API_TOKENS.
func EnvVars() []EnvVar {
	var out []EnvVar
	eachScalar(reflect.ValueOf(Default()).Elem(), "", func(key, env string, _ reflect.Value) {
		out = append(out, EnvVar{Key: key, Env: env})
	})
	return append(out, EnvVar{Key: "http.tokens", Env: TokensEnv})
}

// eachScalar calls fn for every string, integer and Duration field reachable
// through structs (not maps or lists), with its YAML path and env name.
func eachScalar(v reflect.Value, path string, fn func(key, env string, field reflect.Value)) {
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
			f.Type.Kind() == reflect.Int, f.Type.Kind() == reflect.Int64:
			env := envTag
			if env == "" {
				env = "TETHER_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
			}
			fn(key, env, fv)
		case f.Type.Kind() == reflect.Struct:
			eachScalar(fv, key, fn)
		}
	}
}

// applyEnv overrides scalar keys from the environment. An empty variable
// counts as unset. Every malformed value is reported, naming the variable.
func applyEnv(cfg *Config, getenv func(string) string) error {
	var errs []error
	eachScalar(reflect.ValueOf(cfg).Elem(), "", func(key, env string, fv reflect.Value) {
		raw := getenv(env)
		if raw == "" {
			return
		}
		if err := setScalar(fv, strings.TrimSpace(raw)); err != nil {
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

func setScalar(fv reflect.Value, raw string) error {
	switch {
	case fv.Type() == durationType:
		d, err := ParseDuration(raw)
		if err != nil {
			return err
		}
		fv.SetInt(int64(d))
	case fv.Kind() == reflect.String:
		fv.SetString(raw)
	case fv.Kind() == reflect.Int, fv.Kind() == reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", raw)
		}
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
		name, token, ok := strings.Cut(part, ":")
		if !ok || name == "" || token == "" {
			return nil, fmt.Errorf("entry %d: want name:token", i+1)
		}
		out = append(out, Token{Name: name, Token: token})
	}
	return out, nil
}

// SecretEnv reports the agent's own secrets and settings, which no plugin
// may see: the database URL and password, and every TETHER_* variable (API
// tokens among them). The plugin host scrubs them; validation refuses them
// in pass_env.
func SecretEnv(name string) bool {
	switch name {
	case "DATABASE_URL", "PGPASSWORD":
		return true
	}
	return strings.HasPrefix(name, "TETHER_")
}
