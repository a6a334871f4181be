package sparkeks

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/localstack/emulator"
	"github.com/tetherjobs/tether/pkg/plugin"
)

func testTokenSource(cluster string) *eksTokenSource {
	return newEKSTokenSourceFromConfig(aws.Config{
		Region:      "eu-west-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", ""),
	}, cluster)
}

func TestEKSToken(t *testing.T) {
	src := testTokenSource("my-cluster")
	tok, err := src.Token(context.Background())
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(tok, "k8s-aws-v1."), tok)
	assert.NotContains(t, tok, "=", "base64url without padding")
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, "k8s-aws-v1."))
	require.NoError(t, err)
	u, err := url.Parse(string(raw))
	require.NoError(t, err)
	assert.Equal(t, "https", u.Scheme)
	assert.Equal(t, "sts.eu-west-1.amazonaws.com", u.Host)
	q := u.Query()
	assert.Equal(t, "GetCallerIdentity", q.Get("Action"))
	assert.Equal(t, "60", q.Get("X-Amz-Expires"))
	assert.NotEmpty(t, q.Get("X-Amz-Signature"))
	assert.Contains(t, q.Get("X-Amz-Credential"), "AKIDEXAMPLE/")
	assert.Contains(t, strings.Split(q.Get("X-Amz-SignedHeaders"), ";"), "x-k8s-aws-id")

	// Cached until renewal is due, then presigned again.
	again, err := src.Token(context.Background())
	require.NoError(t, err)
	assert.Equal(t, tok, again)
	src.now = func() time.Time { return time.Now().Add(eksTokenRenew + time.Second) }
	renewed, err := src.Token(context.Background())
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(renewed, "k8s-aws-v1."))
}

type recordingTransport struct{ header http.Header }

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.header = req.Header.Clone()
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

func TestEKSTransportSetsBearer(t *testing.T) {
	next := &recordingTransport{}
	rt := testTokenSource("c").wrap(next)
	req, err := http.NewRequest(http.MethodGet, "https://example.invalid/version", nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.True(t, strings.HasPrefix(next.header.Get("Authorization"), "Bearer k8s-aws-v1."))
	assert.Empty(t, req.Header.Get("Authorization"), "the caller's request is not modified")
}

func TestRestConfig(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	require.NoError(t, os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://a.example:6443"}
- name: b
  cluster: {server: "https://b.example:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: ctx-a
  context: {cluster: a, user: u}
- name: ctx-b
  context: {cluster: b, user: u}
current-context: ctx-a
`), 0o600))
	rc, err := restConfig(context.Background(), Access{Kubeconfig: kc})
	require.NoError(t, err)
	assert.Equal(t, "https://a.example:6443", rc.Host)
	rc, err = restConfig(context.Background(), Access{Kubeconfig: kc, Context: "ctx-b"})
	require.NoError(t, err)
	assert.Equal(t, "https://b.example:6443", rc.Host)
	_, err = restConfig(context.Background(), Access{Kubeconfig: filepath.Join(dir, "missing")})
	assert.ErrorContains(t, err, "sparkeks: kubeconfig")

	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	rc, err = restConfig(context.Background(), Access{EKSCluster: "c", Region: "eu-west-1", EKSEndpoint: "https://x.eks.amazonaws.com", EKSCAData: base64.StdEncoding.EncodeToString([]byte("ca"))})
	require.NoError(t, err)
	assert.Equal(t, "https://x.eks.amazonaws.com", rc.Host)
	assert.Equal(t, []byte("ca"), rc.CAData)
	require.NotNil(t, rc.WrapTransport)
}

// startEmulator runs the local AWS emulator. The SDK's credentials come
// from the environment, as the plugin's do.
func startEmulator(t *testing.T) (*emulator.Emulator, string) {
	t.Helper()
	em := emulator.New(emulator.Options{})
	url, err := em.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, em.Close()) })
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return em, url
}

func TestDescribeEKSCluster(t *testing.T) {
	em, url := startEmulator(t)
	ctx := context.Background()
	a := Access{EKSCluster: "analytics", Region: "us-east-1", AWSEndpoint: url}
	cfg, err := eksAWSConfig(ctx, a)
	require.NoError(t, err)
	client := eks.NewFromConfig(cfg)
	ca := base64.StdEncoding.EncodeToString([]byte("ca"))

	t.Run("missing", func(t *testing.T) {
		_, err := describeEKSCluster(ctx, client, "analytics", "us-east-1")
		require.Error(t, err)
		assert.Equal(t, plugin.Permanent, plugin.ClassOf(err))
		assert.Contains(t, err.Error(), `EKS cluster "analytics" not found in region us-east-1`)
	})
	t.Run("active", func(t *testing.T) {
		em.PutEKSCluster("analytics", "https://k8s.example:6443", ca)
		c, err := describeEKSCluster(ctx, client, "analytics", "us-east-1")
		require.NoError(t, err)
		assert.Equal(t, eksCluster{endpoint: "https://k8s.example:6443", caData: ca}, c)
	})
	for _, tc := range []struct {
		status string
		class  plugin.ErrorClass
	}{
		{"CREATING", plugin.Retriable},
		{"DELETING", plugin.Permanent},
		{"FAILED", plugin.Permanent},
	} {
		t.Run(tc.status, func(t *testing.T) {
			require.True(t, em.SetEKSClusterStatus("analytics", tc.status))
			_, err := describeEKSCluster(ctx, client, "analytics", "us-east-1")
			require.Error(t, err)
			assert.Equal(t, tc.class, plugin.ClassOf(err), "%v", err)
			assert.Contains(t, err.Error(), `EKS cluster "analytics" in region us-east-1 is `+tc.status)
		})
	}
	t.Run("UPDATING serves", func(t *testing.T) {
		require.True(t, em.SetEKSClusterStatus("analytics", "UPDATING"))
		c, err := describeEKSCluster(ctx, client, "analytics", "us-east-1")
		require.NoError(t, err)
		assert.Equal(t, "https://k8s.example:6443", c.endpoint)
	})
	t.Run("server errors", func(t *testing.T) {
		require.True(t, em.SetEKSClusterStatus("analytics", "ACTIVE"))
		em.SetFaults(emulator.Faults{ServerErrorRate: 1})
		defer em.SetFaults(emulator.Faults{})
		_, err := describeEKSCluster(ctx, client, "analytics", "us-east-1")
		require.Error(t, err)
		assert.Equal(t, plugin.Retriable, plugin.ClassOf(err), "%v", err)
	})
}

// Without eks_endpoint and eks_ca_data, the client cache describes the
// cluster once and keeps the result with the clients.
func TestRestConfigLooksTheClusterUp(t *testing.T) {
	em, url := startEmulator(t)
	ctx := context.Background()
	a := Access{EKSCluster: "analytics", Region: "us-east-1", AWSEndpoint: url}

	var cache clientCache
	_, err := cache.get(ctx, a)
	require.Error(t, err)
	assert.Equal(t, plugin.Permanent, plugin.ClassOf(err))
	assert.Contains(t, err.Error(), "not found")

	srv := httptest.NewTLSServer(http.NotFoundHandler())
	srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	em.PutEKSCluster("analytics", "https://k8s.example:6443", base64.StdEncoding.EncodeToString(caPEM))
	em.SetEKSClusterStatus("analytics", "CREATING")
	_, err = cache.get(ctx, a)
	assert.Equal(t, plugin.Retriable, plugin.ClassOf(err), "%v", err)

	em.SetEKSClusterStatus("analytics", "ACTIVE")
	cl, err := cache.get(ctx, a)
	require.NoError(t, err, "a failed lookup is not cached")
	assert.Equal(t, "https://k8s.example:6443", cl.host)

	rc, err := restConfig(ctx, a)
	require.NoError(t, err)
	assert.Equal(t, caPEM, rc.CAData)
	// The token is presigned against aws_endpoint too.
	next := &recordingTransport{}
	req, err := http.NewRequest(http.MethodGet, "https://k8s.example:6443/version", nil)
	require.NoError(t, err)
	resp, err := rc.WrapTransport(next).RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(next.header.Get("Authorization"), "Bearer k8s-aws-v1."))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(raw), url+"/?"), "%s", raw)
	assert.Contains(t, string(raw), "Action=GetCallerIdentity")

	// Cached. The cluster's disappearance does not matter to the clients
	// already made.
	em.DeleteEKSCluster("analytics")
	again, err := cache.get(ctx, a)
	require.NoError(t, err)
	assert.Same(t, cl, again)
}
