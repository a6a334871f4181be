package sparkeks

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/tetherjobs/tether/pkg/plugin"
)

const (
	// eksTokenPrefix marks an EKS bearer token, as aws-iam-authenticator makes them.
	eksTokenPrefix = "k8s-aws-v1."
	// eksClusterHeader carries the cluster name in the signed request, so a
	// token for one cluster is refused by another.
	eksClusterHeader = "x-k8s-aws-id"
	// EKS accepts a token for 15 minutes. Renewing after 10 leaves margin.
	eksTokenRenew = 10 * time.Minute
	// eksCredsMargin is a margin. A token is renewed this long before the
	// credentials that signed it expire (temporary credentials: a role's,
	// SSO's), since STS refuses a presigned request whose credentials have
	// expired.
	eksCredsMargin = time.Minute
)

// eksTokenSource makes bearer tokens for an EKS cluster: a presigned STS
// GetCallerIdentity URL, which the cluster's authenticator calls to learn
// the caller's IAM identity. Credentials come from the SDK's default chain
// (the environment the agent passes, or a role).
type eksTokenSource struct {
	cluster string
	presign *sts.PresignClient
	creds   aws.CredentialsProvider // nil: no expiry known
	now     func() time.Time

	mu      sync.Mutex
	token   string
	renewAt time.Time
}

// eksAWSConfig is the SDK configuration of an EKS access: its region, the
// default credential chain, and aws_endpoint when set (otherwise the SDK
// resolves endpoints itself, AWS_ENDPOINT_URL included).
func eksAWSConfig(ctx context.Context, a Access) (aws.Config, error) {
	// An empty aws_endpoint has no effect (WithBaseEndpoint's doc).
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(a.Region), awsconfig.WithBaseEndpoint(a.AWSEndpoint))
	if err != nil {
		return aws.Config{}, plugin.Errorf(plugin.Permanent, "sparkeks: loading AWS configuration for EKS cluster %q: %v", a.EKSCluster, err)
	}
	return cfg, nil
}

// eksCluster is what the plugin needs of an EKS cluster to reach its API
// server.
type eksCluster struct {
	endpoint string
	caData   string // base64
}

// describeEKSCluster looks the cluster's API server endpoint and CA up. A
// missing cluster, or one that cannot become usable, is Permanent. One still
// being created or updated is Retriable.
func describeEKSCluster(ctx context.Context, client *eks.Client, cluster, region string) (eksCluster, error) {
	out, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(cluster)})
	if err != nil {
		var notFound *ekstypes.ResourceNotFoundException
		switch {
		case errors.As(err, &notFound):
			return eksCluster{}, plugin.Errorf(plugin.Permanent, "sparkeks: EKS cluster %q not found in region %s (check eks_cluster and region): %v", cluster, region, err)
		case ctx.Err() != nil:
			return eksCluster{}, fmt.Errorf("sparkeks: describing EKS cluster %q in region %s: %w", cluster, region, ctx.Err())
		case refused(err):
			return eksCluster{}, plugin.Errorf(plugin.Permanent, "sparkeks: describing EKS cluster %q in region %s: %v", cluster, region, err)
		default:
			return eksCluster{}, plugin.Errorf(plugin.Retriable, "sparkeks: describing EKS cluster %q in region %s: %v", cluster, region, err)
		}
	}
	c := out.Cluster
	if c == nil {
		return eksCluster{}, plugin.Errorf(plugin.Retriable, "sparkeks: describing EKS cluster %q in region %s: the answer has no cluster", cluster, region)
	}
	switch c.Status {
	case ekstypes.ClusterStatusActive, ekstypes.ClusterStatusUpdating:
		// An updating cluster keeps serving its API (version or config
		// upgrades roll the control plane behind the same endpoint).
	case ekstypes.ClusterStatusCreating, ekstypes.ClusterStatusPending:
		return eksCluster{}, plugin.Errorf(plugin.Retriable, "sparkeks: EKS cluster %q in region %s is %s, not ACTIVE yet", cluster, region, c.Status)
	default:
		return eksCluster{}, plugin.Errorf(plugin.Permanent, "sparkeks: EKS cluster %q in region %s is %s, not ACTIVE", cluster, region, c.Status)
	}
	ec := eksCluster{endpoint: aws.ToString(c.Endpoint)}
	if c.CertificateAuthority != nil {
		ec.caData = aws.ToString(c.CertificateAuthority.Data)
	}
	if ec.endpoint == "" || ec.caData == "" {
		return eksCluster{}, plugin.Errorf(plugin.Permanent, "sparkeks: EKS cluster %q in region %s: DescribeCluster gave no endpoint or certificate authority data", cluster, region)
	}
	return ec, nil
}

// throttlingCodes are AWS errors that reject a request without doing it.
var throttlingCodes = map[string]bool{
	"ThrottlingException": true, "Throttling": true, "TooManyRequestsException": true,
	"RequestLimitExceeded": true, "RequestThrottled": true, "ServiceUnavailable": true,
}

// refused reports whether AWS refused the request as wrong (access denied,
// invalid parameter). Asking again cannot help. Throttling, 5xx and network
// errors can pass.
func refused(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorFault() == smithy.FaultClient && !throttlingCodes[ae.ErrorCode()]
}

func newEKSTokenSourceFromConfig(cfg aws.Config, cluster string) *eksTokenSource {
	return &eksTokenSource{cluster: cluster, presign: sts.NewPresignClient(sts.NewFromConfig(cfg)), creds: cfg.Credentials, now: time.Now}
}

// Token returns a valid token, presigning a new one when the cached one is
// due for renewal.
func (s *eksTokenSource) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if now.Before(s.renewAt) { // zero, as the token is, until one is made
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
	if s.creds != nil {
		// The SDK caches credentials (aws.CredentialsCache), so this is the
		// set the presign just used.
		if c, err := s.creds.Retrieve(ctx); err == nil && c.CanExpire {
			s.renewAt = tokenRenewAt(now, c.Expires)
		}
	}
	return s.token, nil
}

// tokenRenewAt is when a token made at now with credentials expiring at
// expires is renewed. After eksTokenRenew, or eksCredsMargin before the
// credentials expire if that is sooner (at once when that has passed).
func tokenRenewAt(now, expires time.Time) time.Time {
	at := now.Add(eksTokenRenew)
	if e := expires.Add(-eksCredsMargin); e.Before(at) {
		at = e
	}
	return at
}

// invalidate drops the cached token if it is still tok. The API server
// refused it (401), so the next request presigns a new one.
func (s *eksTokenSource) invalidate(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token == tok {
		s.token, s.renewAt = "", time.Time{}
	}
}

// wrap is a rest.Config WrapTransport. Every request carries the token.
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
	resp, err := a.next.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		// Refused (expired early, credentials rotated, clock skew). The
		// request fails as it is (the caller retries it within
		// auth_grace), and the next one carries a fresh token.
		a.src.invalidate(tok)
	}
	return resp, err
}
