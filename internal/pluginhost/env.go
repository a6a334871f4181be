package pluginhost

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/tetherjobs/tether/internal/config"
)

// isBase reports whether every plugin gets name from the agent's
// environment. Nothing else passes unless the plugin's config says so.
func isBase(name string) bool {
	switch name {
	case "PATH", "HOME", "TMPDIR", "LANG":
		return true
	}
	return strings.HasPrefix(name, "LC_")
}

// forbidden reports whether name must never reach a plugin. The agent's
// database settings (DATABASE_URL and every PG* variable) and its own
// TETHER_* settings and tokens. See config.SecretEnv.
func forbidden(name string) bool { return config.SecretEnv(name) }

func matches(pattern, name string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, prefix)
	}
	return pattern == name
}

// validatePassEnv rejects patterns that are malformed, name what a plugin
// may never see, or select nothing else ("PG*"). A wider wildcard that
// merely covers such a name is fine, the name is skipped. The rule is the
// agent config's (config.CheckPassEnv).
func validatePassEnv(patterns []string) error {
	for i, p := range patterns {
		if err := config.CheckPassEnv(p); err != nil {
			return fmt.Errorf("pass_env[%d]: %w", i, err)
		}
	}
	return nil
}

// scrubbedEnv builds a plugin's environment from the agent's (environ, as
// os.Environ), the plugin's pass-through patterns and its explicit variables.
// A forbidden variable of the agent's never passes, whatever the pattern
// ("*", "P*" or its exact name). explicit variables are the operator's and
// are set as given.
func scrubbedEnv(environ []string, passEnv []string, explicit map[string]string) []string {
	vars := map[string]string{}
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" || forbidden(name) {
			continue
		}
		if isBase(name) || slices.ContainsFunc(passEnv, func(p string) bool { return matches(p, name) }) {
			vars[name] = value
		}
	}
	maps.Copy(vars, explicit)
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}
