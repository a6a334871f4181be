package sparkeks

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
