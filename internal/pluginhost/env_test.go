package pluginhost

import (
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
	assert.NoError(t, validatePassEnv([]string{"PG*"}), "a wildcard that merely covers a secret is fine; the secret is skipped")
}
