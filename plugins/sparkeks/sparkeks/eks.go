package sparkeks

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/tetherjobs/tether/pkg/plugin"
)

const (
	// eksTokenPrefix marks an EKS bearer token, as aws-iam-authenticator makes them.
	eksTokenPrefix = "k8s-aws-v1."
	// eksClusterHeader carries the cluster name in the signed request, so a
	// token for one cluster is refused by another.
	eksClusterHeader = "x-k8s-aws-id"
	// EKS accepts a token for 15 minutes; renewing after 10 leaves margin.
	eksTokenRenew = 10 * time.Minute
)

// eksTokenSource makes bearer tokens for an EKS cluster: a presigned STS
// GetCallerIdentity URL, which the cluster's authenticator calls to learn
// the caller's IAM identity. Credentials come from the SDK's default chain
// (the environment the agent passes, or a role).
type eksTokenSource struct {
	cluster string
	presign *sts.PresignClient
	now     func() time.Time

	mu      sync.Mutex
	token   string
	renewAt time.Time
}

func newEKSTokenSource(ctx context.Context, cluster, region string) (*eksTokenSource, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region))
	if err != nil {
		return nil, plugin.Errorf(plugin.Permanent, "sparkeks: loading AWS configuration for EKS cluster %q: %v", cluster, err)
	}
	return newEKSTokenSourceFromConfig(cfg, cluster), nil
}

func newEKSTokenSourceFromConfig(cfg aws.Config, cluster string) *eksTokenSource {
	return &eksTokenSource{cluster: cluster, presign: sts.NewPresignClient(sts.NewFromConfig(cfg)), now: time.Now}
}

// Token returns a valid token, presigning a new one when the cached one is
// due for renewal.
func (s *eksTokenSource) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.token != "" && now.Before(s.renewAt) {
		return s.token, nil
	}
	req, err := s.presign.PresignGetCallerIdentity(ctx, &sts.GetCallerIdentityInput{}, func(o *sts.PresignOptions) {
		o.ClientOptions = append(o.ClientOptions, func(so *sts.Options) {
			so.APIOptions = append(so.APIOptions,
				smithyhttp.SetHeaderValue(eksClusterHeader, s.cluster),
				smithyhttp.SetHeaderValue("X-Amz-Expires", "60"),
			)
		})
	})
	if err != nil {
		return "", fmt.Errorf("sparkeks: presigning an STS GetCallerIdentity request for EKS cluster %q: %w", s.cluster, err)
	}
	s.token = eksTokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(req.URL))
	s.renewAt = now.Add(eksTokenRenew)
	return s.token, nil
}

// wrap is a rest.Config WrapTransport: every request carries the token.
func (s *eksTokenSource) wrap(next http.RoundTripper) http.RoundTripper {
	return &eksAuth{src: s, next: next}
}

type eksAuth struct {
	src  *eksTokenSource
	next http.RoundTripper
}

func (a *eksAuth) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, err := a.src.Token(req.Context())
	if err != nil {
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+tok)
	return a.next.RoundTrip(r)
}
