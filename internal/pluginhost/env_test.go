package pluginhost

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestScrubbedEnvPassesOnlyWhatIsNamed(t *testing.T) {
	got := scrubbedEnv([]string{"PATH=/bin", "HOME=/root", "AWS_REGION=eu", "AWS_SECRET_ACCESS_KEY=x",
		"OTHER=y", "DATABASE_URL=postgres://x", "TETHER_API_TOKENS=a:b"},
		[]string{"AWS_*"}, map[string]string{"B": "2", "A": "1"})
	assert.ElementsMatch(t, []string{"PATH=/bin", "HOME=/root", "AWS_REGION=eu", "AWS_SECRET_ACCESS_KEY=x", "A=1", "B=2"}, got)

	// Even a pass-everything pattern never lets the agent's secrets through.
	all := scrubbedEnv([]string{"HOME=/root", "DATABASE_URL=x", "PGPASSWORD=y", "TETHER_TOKEN=z", "X=1"}, []string{"*"}, nil)
	assert.ElementsMatch(t, []string{"HOME=/root", "X=1"}, all)
}

func TestPassEnvRefusesPGPASSWORD(t *testing.T) {
	assert.ErrorContains(t, validatePassEnv([]string{"PGPASSWORD"}), "never passed to plugins")
	assert.ErrorContains(t, validatePassEnv([]string{"PATH", "PGSSLPASSWORD"}), "pass_env[1]: PGSSLPASSWORD is never passed to plugins")
	assert.ErrorContains(t, validatePassEnv([]string{"PG*"}), "pass_env[0]: PG* is never passed to plugins: it selects only the agent's own settings")
	assert.NoError(t, validatePassEnv([]string{"*", "P*", "AWS_*"}), "a wildcard that merely covers a secret is fine; the secret is skipped")
}

// Every PG* variable is the agent's database connection. None reaches a
// plugin, however pass_env selects it.
func TestScrubbedEnvDropsEveryPGVariable(t *testing.T) {
	environ := []string{"PATH=/bin", "PGPASSWORD=p1", "PGSSLPASSWORD=p2", "PGPASSFILE=.pgpass",
		"PGSERVICEFILE=/etc/pg_service.conf", "PGSERVICE=prod", "PGSSLKEY=/k", "PGSSLCERT=/c", "PGHOST=db",
		"PGUSER=tether", "PGDATABASE=tether", "PGOPTIONS=-c x=y", "DATABASE_URL=postgres://x", "TETHER_API_TOKENS=a:b",
		"PGX_OTHER=1", "PUBLIC=yes"}
	for _, passEnv := range [][]string{
		{"*"}, {"P*"}, {"PG*"}, {"PGSSL*", "PGPASS*"},
		{"PGPASSWORD", "PGSSLPASSWORD", "PGPASSFILE", "PGSERVICEFILE", "PGSSLKEY", "PGHOST", "DATABASE_URL", "TETHER_API_TOKENS"},
	} {
		got := scrubbedEnv(environ, passEnv, nil)
		for _, kv := range got {
			name, _, _ := strings.Cut(kv, "=")
			assert.False(t, strings.HasPrefix(name, "PG"), "pass_env %v let %s through", passEnv, kv)
			assert.NotEqual(t, "DATABASE_URL", name, "pass_env %v", passEnv)
			assert.False(t, strings.HasPrefix(name, "TETHER_"), "pass_env %v let %s through", passEnv, kv)
		}
		assert.Contains(t, got, "PATH=/bin", "pass_env %v: the base variables still pass", passEnv)
	}
	assert.ElementsMatch(t, []string{"PATH=/bin", "PUBLIC=yes"}, scrubbedEnv(environ, []string{"*"}, nil))
	assert.ElementsMatch(t, []string{"PATH=/bin", "PUBLIC=yes"}, scrubbedEnv(environ, []string{"P*"}, nil))
}
