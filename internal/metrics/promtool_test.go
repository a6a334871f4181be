package metrics_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// promtool returns the path of promtool, failing the test with how to get
// it when it is missing.
func promtool(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found on PATH: apt-get install -y prometheus (it provides promtool; .ci/run installs it). The alert rules' tests need it.")
	}
	return bin
}

// Every alert rule fires in the incident it is named for: promtool runs the
// cases of deploy/prometheus-alerts.test.yml, and every alert has a case in
// which it is expected to fire.
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	deploy := filepath.Join("..", "..", "deploy")
	for _, args := range [][]string{
		{"check", "rules", "prometheus-alerts.yml"},
		{"test", "rules", "prometheus-alerts.test.yml"},
	} {
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Dir = deploy
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %v:\n%s", args, out)
	}

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, filepath.Join(deploy, "prometheus-alerts.yml"), &rules)
	var tests struct {
		Tests []struct {
			Name  string `yaml:"name"`
			Cases []struct {
				Alert string `yaml:"alertname"`
				Exp   []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, filepath.Join(deploy, "prometheus-alerts.test.yml"), &tests)
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, c := range tc.Cases {
			fires[c.Alert] = fires[c.Alert] || len(c.Exp) > 0
		}
	}
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts++
			assert.True(t, fires[r.Alert], "alert %s has no promtool case in which it fires (deploy/prometheus-alerts.test.yml)", r.Alert)
		}
	}
	assert.Greater(t, alerts, 10)
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, v), path)
}
