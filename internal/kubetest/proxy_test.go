package kubetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// A client that knows only the proxy's URL and CA, and sends a bearer token
// the apiserver has never heard of, still gets through: the proxy records
// the token and authenticates as the admin itself.
func TestProxyURLCADataAndBearerTokens(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := StartProxy(testEnv, t.TempDir())
	require.NoError(t, err)
	defer p.Close()
	require.Empty(t, p.BearerTokens())

	for _, tok := range []string{"first-token", "second-token", "first-token"} {
		cs, err := kubernetes.NewForConfig(&rest.Config{
			Host:            p.URL(),
			TLSClientConfig: rest.TLSClientConfig{CAData: p.CAData()},
			BearerToken:     tok,
		})
		require.NoError(t, err)
		_, err = cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		require.NoError(t, err)
	}
	require.Equal(t, []string{"first-token", "second-token"}, p.BearerTokens())

	// Without the CA, the proxy's certificate is not trusted.
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: p.URL()})
	require.NoError(t, err)
	_, err = cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	require.ErrorContains(t, err, "certificate")
}
