package dbsecret

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/localstack/emulator"
)

func TestApply(t *testing.T) {
	for _, tc := range []struct {
		name, value, url, want, err string
	}{
		{name: "password alone", value: "s3cr:t/@", url: "postgres://tether@db:5432/tether?sslmode=require", want: "postgres://tether:s3cr%3At%2F%40@db:5432/tether?sslmode=require"},
		{name: "password replaces the URL's", value: "new", url: "postgres://tether:old@db/tether", want: "postgres://tether:new@db/tether"},
		{name: "RDS-managed JSON", value: `{"username":"postgres","password":"p@ss"}`, url: "postgres://db.abc.eu-west-1.rds.amazonaws.com/tether?sslmode=verify-full", want: "postgres://postgres:p%40ss@db.abc.eu-west-1.rds.amazonaws.com/tether?sslmode=verify-full"},
		{name: "JSON password keeps the URL's user", value: `{"password":"p"}`, url: "postgres://tether@db/t", want: "postgres://tether:p@db/t"},
		{name: "rotation template JSON without a URL", value: `{"engine":"postgres","host":"db.internal","port":5433,"username":"tether","password":"p","dbname":"jobs"}`, want: "postgres://tether:p@db.internal:5433/jobs"},
		{name: "whole URL", value: "postgres://u:p@h/d\n", want: "postgres://u:p@h/d"},
		{name: "URL and database_url", value: "postgres://u:p@h/d", url: "postgres://x@h/d", err: "is a whole database URL and database_url (DATABASE_URL) is set too"},
		{name: "JSON without password", value: `{"username":"u"}`, url: "postgres://h/d", err: `has no "password"`},
		{name: "broken JSON", value: `{"password":"hunter2"`, url: "postgres://u@h/d", err: "not a JSON object (value not shown)"},
		{name: "RDS-managed JSON without a URL", value: `{"username":"u","password":"p"}`, err: "set database_url to postgres://host:5432/db"},
		{name: "no user anywhere", value: "p", url: "postgres://h/d", err: "no user name"},
		{name: "keyword/value database_url", value: "p", url: "host=h user=u", err: "database_url must be a postgres:// URL"},
		{name: "bad port", value: `{"host":"h","username":"u","password":"p","port":"99999"}`, err: `"port" must be a number`},
		{name: "empty", value: " \n", url: "postgres://u@h/d", err: "the secret is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Apply(tc.value, tc.url)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				for _, secret := range []string{"hunter2", "p@ss"} {
					assert.NotContains(t, err.Error(), secret, "errors never quote the secret")
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// Resolve with the real SDK against the emulator's Secrets Manager: by name
// and by partial ARN, AWSCURRENT after a rotation's PutSecretValue, and a
// missing secret named in the error.
func TestResolveFromSecretsManager(t *testing.T) {
	ctx := context.Background()
	_, c := secretsManager(t)
	created, err := c.CreateSecret(ctx, &secretsmanager.CreateSecretInput{
		Name: aws.String("rds!db-tether"), SecretString: aws.String(`{"username":"postgres","password":"first"}`),
	})
	require.NoError(t, err)
	url := "postgres://db.internal/tether"

	got, err := Resolve(ctx, c, "rds!db-tether", url)
	require.NoError(t, err)
	assert.Equal(t, "postgres://postgres:first@db.internal/tether", got)

	// A rotation ends by making a new version AWSCURRENT.
	_, err = c.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{
		SecretId: created.ARN, SecretString: aws.String(`{"username":"postgres","password":"second"}`),
	})
	require.NoError(t, err)
	partial := aws.ToString(created.ARN)[:len(aws.ToString(created.ARN))-7]
	got, err = Resolve(ctx, c, partial, url)
	require.NoError(t, err)
	assert.Equal(t, "postgres://postgres:second@db.internal/tether", got)
	prev, err := c.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: created.ARN, VersionStage: aws.String("AWSPREVIOUS")})
	require.NoError(t, err)
	assert.Contains(t, aws.ToString(prev.SecretString), "first")

	_, err = Resolve(ctx, c, "tether/missing", url)
	require.ErrorContains(t, err, "database_secret: reading secret tether/missing")
	assert.True(t, strings.Contains(err.Error(), "ResourceNotFoundException"), err.Error())
}

func TestARNRegion(t *testing.T) {
	assert.Equal(t, "eu-west-1", arnRegion("arn:aws:secretsmanager:eu-west-1:123456789012:secret:tether/db-AbCdEf"))
	assert.Equal(t, "", arnRegion("tether/db"))
	assert.Equal(t, "", arnRegion("arn:aws:ssm:eu-west-1:123456789012:parameter/x"))
}

// secretsManager starts an emulator and returns it with a real SDK client
// of its Secrets Manager.
func secretsManager(t *testing.T) (*emulator.Emulator, *secretsmanager.Client) {
	t.Helper()
	em := emulator.New(emulator.Options{})
	t.Cleanup(func() { _ = em.Close() })
	base, err := em.Start("127.0.0.1:0")
	require.NoError(t, err)
	return em, secretsmanager.New(secretsmanager.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(base),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}
