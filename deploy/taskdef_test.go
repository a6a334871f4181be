package deploy

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/config"
	"github.com/tetherjobs/tether/internal/image"
)

// The task definition and the configuration baked into the image agree: the
// configuration loads with the container's environment, drain.stop_timeout
// is the container's stopTimeout and the whole drain fits in it, the health
// check and entrypoint are the image's.
func TestTaskDefinitionMatchesConfig(t *testing.T) {
	b, err := os.ReadFile("ecs-task-definition.json")
	require.NoError(t, err)
	var td struct {
		ContainerDefinitions []struct {
			Name        string
			StopTimeout int
			Environment []struct{ Name, Value string }
			HealthCheck struct{ Command []string }
		}
	}
	require.NoError(t, json.Unmarshal(b, &td))
	require.Len(t, td.ContainerDefinitions, 1)
	c := td.ContainerDefinitions[0]
	require.Positive(t, c.StopTimeout, "set stopTimeout: ECS waits only 30s without it")
	env := map[string]string{}
	for _, e := range c.Environment {
		env[e.Name] = e.Value
	}
	cfg, err := config.Load("tether.yaml", func(k string) string { return env[k] })
	require.NoError(t, err, "tether.yaml with the task definition's environment")
	stop := time.Duration(c.StopTimeout) * time.Second
	assert.Equal(t, stop, cfg.Drain.StopTimeout.Std(), "drain.stop_timeout is the container's stopTimeout")
	assert.Less(t, cfg.DrainTotal(nil), stop)
	assert.Equal(t, []string{"CMD", image.BinDir + "/tether-healthcheck"}, c.HealthCheck.Command)
	assert.NotEmpty(t, env["TETHER_DATABASE_SECRET"])
	assert.NotContains(t, env["DATABASE_URL"], "@", "no user or password in the task definition: they come from database_secret")
}
