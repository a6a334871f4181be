package emulator

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/stretchr/testify/require"
)

func eksClient(cfg aws.Config, url string) *eks.Client {
	return eks.NewFromConfig(cfg, func(o *eks.Options) { o.BaseEndpoint = aws.String(url) })
}

func TestEKSDescribeCluster(t *testing.T) {
	env := start(t, Options{})
	ctx := context.Background()
	client := eksClient(clientConfig(3), env.url)

	_, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("missing")})
	var nf *ekstypes.ResourceNotFoundException
	require.ErrorAs(t, err, &nf, "%v", err)
	require.Contains(t, nf.ErrorMessage(), "missing")

	env.em.PutEKSCluster("analytics", "https://127.0.0.1:6443", "Q0E=")
	out, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("analytics")})
	require.NoError(t, err)
	c := out.Cluster
	require.Equal(t, "analytics", aws.ToString(c.Name))
	require.Equal(t, "arn:aws:eks:us-east-1:000000000000:cluster/analytics", aws.ToString(c.Arn))
	require.Equal(t, ekstypes.ClusterStatusActive, c.Status)
	require.Equal(t, "https://127.0.0.1:6443", aws.ToString(c.Endpoint))
	require.Equal(t, "Q0E=", aws.ToString(c.CertificateAuthority.Data))
	require.NotEmpty(t, aws.ToString(c.Version))
	require.NotNil(t, c.CreatedAt)

	require.True(t, env.em.SetEKSClusterStatus("analytics", "CREATING"))
	out, err = client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("analytics")})
	require.NoError(t, err)
	require.Equal(t, ekstypes.ClusterStatusCreating, out.Cluster.Status)
	require.False(t, env.em.SetEKSClusterStatus("missing", "ACTIVE"))

	env.em.DeleteEKSCluster("analytics")
	_, err = client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("analytics")})
	require.ErrorAs(t, err, &nf)

	// The admin endpoint registers clusters for an emulator in its own process.
	resp, err := http.Post(env.url+"/_emulator/eks/clusters", "application/json",
		bytes.NewBufferString(`{"name":"other","endpoint":"https://k8s.example","caData":"Q0E=","status":"UPDATING"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	out, err = client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("other")})
	require.NoError(t, err)
	require.Equal(t, ekstypes.ClusterStatusUpdating, out.Cluster.Status)
	require.Equal(t, "https://k8s.example", aws.ToString(out.Cluster.Endpoint))

	// The JSON-protocol services on the same address are unaffected.
	_, err = env.ecs.DescribeClusters(ctx, &ecs.DescribeClustersInput{})
	require.NoError(t, err)
}

func TestEKSFaults(t *testing.T) {
	env := start(t, Options{ThrottleRate: 1})
	env.em.PutEKSCluster("c", "https://k8s.example", "Q0E=")
	_, err := eksClient(clientConfig(1), env.url).DescribeCluster(context.Background(), &eks.DescribeClusterInput{Name: aws.String("c")})
	require.Error(t, err)
	var re interface{ HTTPStatusCode() int }
	require.True(t, errors.As(err, &re), "%v", err)
	require.Equal(t, http.StatusTooManyRequests, re.HTTPStatusCode())
	require.Contains(t, err.Error(), "ThrottlingException")

	env.em.SetFaults(Faults{ServerErrorRate: 1})
	_, err = eksClient(clientConfig(1), env.url).DescribeCluster(context.Background(), &eks.DescribeClusterInput{Name: aws.String("c")})
	var se *ekstypes.ServerException
	require.ErrorAs(t, err, &se, "%v", err)
}
