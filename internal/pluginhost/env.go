package pluginhost

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tetherjobs/tether/internal/config"
)

// isBase reports whether every plugin gets name from the agent's
// environment; nothing else passes unless the plugin's config says so.
func isBase(name string) bool {
	switch name {
	case "PATH", "HOME", "TMPDIR", "LANG":
		return true
	}
	return strings.HasPrefix(name, "LC_")
}

// forbidden reports whether name must never reach a plugin: the agent's
// database URL and password and its own settings and tokens.
func forbidden(name string) bool { return config.SecretEnv(name) }

func matches(pattern, name string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, prefix)
	}
	return pattern == name
}

// validatePassEnv rejects patterns that are malformed or that name what a
// plugin may never see; a wildcard that merely covers such a name is fine,
// the name is skipped.
func validatePassEnv(patterns []string) error {
	for _, p := range patterns {
		name := strings.TrimSuffix(p, "*")
		switch {
		case name == "" && p != "*":
			return fmt.Errorf("pass_env: empty name")
		case strings.ContainsAny(name, "*= "):
			return fmt.Errorf("pass_env %q: only a trailing * is allowed", p)
		case !strings.HasSuffix(p, "*") && forbidden(p), strings.HasPrefix(name, "TETHER_"):
			return fmt.Errorf("pass_env %q: the agent's DATABASE_URL and TETHER_* settings are never passed to plugins", p)
		}
	}
	return nil
}

// scrubbedEnv builds a plugin's environment from the agent's (environ, as
// os.Environ), the plugin's pass-through patterns and its explicit variables.
func scrubbedEnv(environ []string, passEnv []string, explicit map[string]string) []string {
	vars := map[string]string{}
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" || forbidden(name) {
			continue
		}
		if isBase(name) {
			vars[name] = value
		}
		for _, p := range passEnv {
			if matches(p, name) {
				vars[name] = value
			}
		}
	}
	for k, v := range explicit {
		vars[k] = v
	}
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}
