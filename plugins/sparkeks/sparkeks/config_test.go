package sparkeks

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
)

const minimalCtx = `{"image":"spark:1","main_application_file":"local:///run.py","query":"SELECT 1"}`

func TestParseConfigDefaults(t *testing.T) {
	c, err := parseConfig(json.RawMessage(`{"kubeconfig":"k"}`), json.RawMessage(minimalCtx))
	require.NoError(t, err)
	assert.Equal(t, Access{Kubeconfig: "k"}, c.Access)
	assert.Equal(t, DefaultNamespace, c.Namespace)
	assert.Equal(t, DefaultTimeout, c.Timeout)
	assert.Equal(t, DefaultPollInterval, c.PollInterval)
	assert.Equal(t, DefaultUnknownGrace, c.UnknownGrace)
	assert.Equal(t, 5*time.Minute, c.AuthGrace)
	assert.Equal(t, 15*time.Minute, c.StartupTimeout)
	assert.Equal(t, 24*time.Hour, c.TimeToLive)
	assert.Equal(t, "/etc/tether/spark-sql/query.sql", c.QueryFile())
	assert.Nil(t, c.Arguments)
}

func TestParseConfigMerge(t *testing.T) {
	cfg := `{"kubeconfig":"k","namespace":"a","image":"spark:cfg","timeout":"1h",
		"spark_conf":{"x":"cfg","y":"cfg"},"labels":{"team":"data"},
		"driver":{"cores":1,"memory":"1g","labels":{"a":"1"}},"executor":{"instances":2}}`
	ctx := `{"namespace":"b","image":null,"main_application_file":"local:///run.py","query":"SELECT 1","timeout":"0",
		"spark_conf":{"y":"ctx","z":"ctx"},"labels":{"env":"prod"},
		"driver":{"memory":"2g","labels":{"b":"2"}},"template":{"spec":{"image":"spark:tpl"}}}`
	c, err := parseConfig(json.RawMessage(cfg), json.RawMessage(ctx))
	require.NoError(t, err)
	assert.Equal(t, "b", c.Namespace)
	assert.Equal(t, "", c.Image, "null unsets the config's image; the template's applies")
	assert.Equal(t, time.Duration(0), c.Timeout)
	assert.Equal(t, map[string]string{"x": "cfg", "y": "ctx", "z": "ctx"}, c.SparkConf)
	assert.Equal(t, map[string]string{"team": "data", "env": "prod"}, c.Labels)
	assert.Equal(t, Resources{Cores: 1, Memory: "2g", Labels: map[string]string{"a": "1", "b": "2"}}, c.Driver)
	assert.Equal(t, 2, c.Executor.Instances)
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, cfg, ctx, want string
	}{
		{"unknown config key", `{"kubeconfig":"k","bogus":1}`, minimalCtx, `unknown key "bogus"`},
		{"unknown context key", `{"kubeconfig":"k"}`, `{"nope":1}`, `unknown key "nope"`},
		{"query in config", `{"kubeconfig":"k","query":"x"}`, minimalCtx, "query belongs in the job's context"},
		{"no query", `{"kubeconfig":"k"}`, `{"image":"i","main_application_file":"f"}`, "query: required"},
		{"no image", `{"kubeconfig":"k"}`, `{"main_application_file":"f","query":"q"}`, "image: required"},
		{"no main file", `{"kubeconfig":"k"}`, `{"image":"i","query":"q"}`, "main_application_file: required"},
		{"no access", `{}`, minimalCtx, "cluster access: none configured"},
		{"two accesses", `{"kubeconfig":"k","in_cluster":true}`, minimalCtx, "kubeconfig and in_cluster are all set"},
		{"context alone", `{"in_cluster":true,"context":"c"}`, minimalCtx, "context: only applies with kubeconfig"},
		{"eks without endpoint", `{"eks_cluster":"c","region":"eu-west-1","eks_ca_data":"Y2E="}`, minimalCtx, "eks_endpoint, eks_ca_data: set both"},
		{"eks without ca", `{"eks_cluster":"c","region":"eu-west-1","eks_endpoint":"https://x"}`, minimalCtx, "eks_endpoint is set without eks_ca_data"},
		{"eks without region", `{"eks_cluster":"c"}`, minimalCtx, "region: required with eks_cluster"},
		{"eks bad endpoint", `{"eks_cluster":"c","region":"r","eks_endpoint":"x.eks.amazonaws.com","eks_ca_data":"Y2E="}`, minimalCtx, "eks_endpoint: must be the cluster's https://"},
		{"aws_endpoint not a URL", `{"eks_cluster":"c","region":"r","aws_endpoint":"localhost:4566"}`, minimalCtx, "aws_endpoint: must be an http:// or https:// URL"},
		{"aws_endpoint without eks", `{"kubeconfig":"k","aws_endpoint":"http://localhost:4566"}`, minimalCtx, "aws_endpoint: only applies with eks_cluster"},
		{"eks bad ca", `{"eks_cluster":"c","region":"r","eks_endpoint":"https://x","eks_ca_data":"%%"}`, minimalCtx, "eks_ca_data: must be"},
		{"region without eks", `{"kubeconfig":"k","region":"r"}`, minimalCtx, "region: only applies with eks_cluster"},
		{"in_cluster type", `{"in_cluster":"yes"}`, minimalCtx, "in_cluster: must be true or false"},
		{"type", `{"kubeconfig":"k","type":"Go"}`, minimalCtx, "type: must be one of"},
		{"mode", `{"kubeconfig":"k","mode":"local"}`, minimalCtx, `mode: must be "cluster"`},
		{"mode client", `{"kubeconfig":"k","mode":"client"}`, minimalCtx, `mode: must be "cluster", got "client"`},
		{"mode in-cluster-client", `{"kubeconfig":"k","mode":"in-cluster-client"}`, minimalCtx, `mode: must be "cluster"`},
		{"template mode", `{"kubeconfig":"k","template":{"spec":{"mode":"client"}}}`, minimalCtx, `template.spec.mode: must be "cluster"`},
		{"template restartPolicy", `{"kubeconfig":"k","template":{"spec":{"restartPolicy":{"type":"OnFailure","onFailureRetries":3}}}}`, minimalCtx, `template.spec.restartPolicy.type: must be "Never"`},
		{"template restartPolicy always", `{"kubeconfig":"k","template":"spec:\n  restartPolicy:\n    type: Always\n"}`, minimalCtx, "would run the query's partial writes again"},
		{"template restartPolicy shape", `{"kubeconfig":"k","template":{"spec":{"restartPolicy":"Never"}}}`, minimalCtx, "spec.restartPolicy must be a mapping"},
		{"auth_grace", `{"kubeconfig":"k","auth_grace":"-1s"}`, minimalCtx, "auth_grace: must be a non-negative duration"},
		{"startup_timeout", `{"kubeconfig":"k","startup_timeout":"soon"}`, minimalCtx, "startup_timeout: must be"},
		{"time_to_live short", `{"kubeconfig":"k","time_to_live":"2m"}`, minimalCtx, "time_to_live: must be at least 10m0s"},
		{"time_to_live zero", `{"kubeconfig":"k","time_to_live":"0"}`, minimalCtx, "time_to_live: must be positive"},
		{"pull policy", `{"kubeconfig":"k","image_pull_policy":"Sometimes"}`, minimalCtx, "image_pull_policy"},
		{"namespace", `{"kubeconfig":"k","namespace":"Bad_NS"}`, minimalCtx, "namespace:"},
		{"service account", `{"kubeconfig":"k","service_account":"a b"}`, minimalCtx, "service_account:"},
		{"timeout", `{"kubeconfig":"k","timeout":"soon"}`, minimalCtx, "timeout: must be a non-negative duration"},
		{"poll zero", `{"kubeconfig":"k","poll_interval":"0"}`, minimalCtx, "poll_interval: must be positive"},
		{"arguments", `{"kubeconfig":"k","arguments":"--x"}`, minimalCtx, "arguments: must be a list of strings"},
		{"arguments item", `{"kubeconfig":"k","arguments":[1]}`, minimalCtx, "arguments[0]: must be a string"},
		{"spark_conf value", `{"kubeconfig":"k","spark_conf":{"a":1}}`, minimalCtx, "spark_conf.a: must be a string"},
		{"driver key", `{"kubeconfig":"k","driver":{"gpus":1}}`, minimalCtx, `driver: unknown key "gpus"`},
		{"driver cores", `{"kubeconfig":"k","driver":{"cores":0}}`, minimalCtx, "driver.cores: must be between"},
		{"executor instances", `{"kubeconfig":"k","executor":{"instances":"2"}}`, minimalCtx, "executor.instances: must be a whole number"},
		{"label key", `{"kubeconfig":"k","labels":{"bad key":"v"}}`, minimalCtx, `labels: key "bad key"`},
		{"reserved label", `{"kubeconfig":"k","labels":{"tether.dev/job-id":"v"}}`, minimalCtx, "reserved for tether"},
		{"template kind", `{"kubeconfig":"k","template":{"kind":"Pod"}}`, minimalCtx, "template: kind must be"},
		{"template yaml", `{"kubeconfig":"k","template":"spec: [1"}`, minimalCtx, "template: not valid YAML"},
		{"template spec", `{"kubeconfig":"k","template":{"spec":[]}}`, minimalCtx, "template: spec must be a mapping"},
		{"mount path", `{"kubeconfig":"k","query_mount_path":"rel/path"}`, minimalCtx, "query_mount_path: must be a clean absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(json.RawMessage(tc.cfg), json.RawMessage(tc.ctx))
			require.Error(t, err)
			assert.Equal(t, plugin.Permanent, plugin.ClassOf(err))
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "sparkeks: ")
		})
	}
}

func TestTemplateSatisfiesRequired(t *testing.T) {
	c, err := parseConfig(json.RawMessage(`{"kubeconfig":"k"}`), json.RawMessage(`{"query":"q","template":"spec:\n  image: spark:tpl\n  mainApplicationFile: local:///x.py\n"}`))
	require.NoError(t, err)
	assert.Equal(t, "spark:tpl", c.Template["spec"].(map[string]any)["image"])
}

func TestParseClusterConfig(t *testing.T) {
	a, err := parseClusterConfig(json.RawMessage(`{"eks_cluster":"c","region":"eu-west-1","eks_endpoint":"https://x.eks.amazonaws.com","eks_ca_data":"Y2E=","image":"i"}`))
	require.NoError(t, err)
	assert.Equal(t, Access{EKSCluster: "c", Region: "eu-west-1", EKSEndpoint: "https://x.eks.amazonaws.com", EKSCAData: "Y2E="}, a)
	// Cluster name and region alone. The rest is looked up.
	a, err = parseClusterConfig(json.RawMessage(`{"eks_cluster":"c","region":"eu-west-1","aws_endpoint":"http://127.0.0.1:4566"}`))
	require.NoError(t, err)
	assert.Equal(t, Access{EKSCluster: "c", Region: "eu-west-1", AWSEndpoint: "http://127.0.0.1:4566"}, a)
	c, err := parseConfig(json.RawMessage(`{"eks_cluster":"c","region":"eu-west-1"}`), json.RawMessage(minimalCtx))
	require.NoError(t, err)
	assert.Equal(t, Access{EKSCluster: "c", Region: "eu-west-1"}, c.Access)

	_, err = parseClusterConfig(json.RawMessage(`{"kubeconfig":"k","oops":1}`))
	assert.ErrorContains(t, err, `unknown key "oops"`)
}

// The decoding tables and the lists of accepted keys are kept apart. Every
// key must have a decoder in the table of its kind.
func TestEveryKeyHasADecoder(t *testing.T) {
	var a Access
	access := a.fields()
	for _, k := range accessKeys {
		require.Contains(t, access, k)
	}
	require.Len(t, access, len(accessKeys))
	var c Config
	fields := c.fields()
	for _, k := range append(slices.Clone(appKeys), "query") {
		require.Contains(t, fields, k)
	}
	require.Len(t, fields, len(appKeys)+1)
}
