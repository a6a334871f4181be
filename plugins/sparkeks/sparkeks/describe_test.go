package sparkeks

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/pkg/plugin"
)

func TestDescribe(t *testing.T) {
	encode := func(h Handle) []byte {
		h.Version = handleVersion
		b, err := h.encode()
		require.NoError(t, err)
		return b
	}
	app := AppName("0190a0a0-0000-7000-8000-000000000001")
	for _, tc := range []struct {
		name   string
		handle []byte
		want   []plugin.Resource
	}{
		{"created, no driver yet", encode(Handle{Name: app, Namespace: "spark"}), []plugin.Resource{{
			Kind: "spark_application", Name: "spark/" + app, Label: "Spark application",
			Command: "kubectl -n spark get sparkapplication " + app + " -o yaml",
		}}},
		{"running with its driver", encode(Handle{Name: app, Namespace: "spark", SparkApplicationID: "spark-0a1b", DriverPod: app + "-driver"}), []plugin.Resource{
			{
				Kind: "spark_application", Name: "spark/" + app, Label: "Spark application spark-0a1b",
				Command: "kubectl -n spark get sparkapplication " + app + " -o yaml",
			},
			{
				Kind: "kubernetes_pod", Name: "spark/" + app + "-driver", Label: "Spark driver pod",
				Command: "kubectl -n spark logs -f " + app + "-driver",
			},
		}},
		{"names are quoted for the shell", encode(Handle{Name: "a b", Namespace: "$(x)"}), []plugin.Resource{{
			Kind: "spark_application", Name: "$(x)/a b", Label: "Spark application",
			Command: "kubectl -n '$(x)' get sparkapplication 'a b' -o yaml",
		}}},
		{"no name yet", encode(Handle{Namespace: "spark"}), nil},
		{"unreadable handle", []byte("nope"), nil},
		{"another version", []byte(`{"v":99,"name":"x","namespace":"y"}`), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, New().Describe(&plugin.Job{ID: "j"}, tc.handle))
		})
	}
}
