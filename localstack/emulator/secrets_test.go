package emulator

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ptr(s string) *string { return &s }

// The version rules of PutSecretValue the agent's rotation handling relies
// on: AWSCURRENT moves, AWSPREVIOUS follows it, a repeated token is
// idempotent and a reused one with another value is refused.
func TestSecretVersions(t *testing.T) {
	s := newSecretStore()
	_, err := s.createSecret(struct {
		Name               string
		SecretString       *string
		ClientRequestToken string
		Description        string
	}{Name: "db", SecretString: ptr("one")})
	require.NoError(t, err)
	_, err = s.createSecret(struct {
		Name               string
		SecretString       *string
		ClientRequestToken string
		Description        string
	}{Name: "db"})
	assertAPIError(t, err, "ResourceExistsException")

	put := func(token, value string) error {
		_, err := s.putSecretValue(struct {
			SecretId           string
			SecretString       *string
			ClientRequestToken string
			VersionStages      []string
		}{SecretId: "db", SecretString: ptr(value), ClientRequestToken: token})
		return err
	}
	get := func(stage string) (string, error) {
		out, err := s.getSecretValue(struct {
			SecretId     string
			VersionId    string
			VersionStage string
		}{SecretId: "db", VersionStage: stage})
		if err != nil {
			return "", err
		}
		return out.(map[string]any)["SecretString"].(string), nil
	}
	require.NoError(t, put("t2", "two"))
	require.NoError(t, put("t2", "two"), "the same token and value: idempotent")
	assertAPIError(t, put("t2", "other"), "ResourceExistsException")
	require.NoError(t, put("t3", "three"))
	cur, err := get("")
	require.NoError(t, err)
	assert.Equal(t, "three", cur)
	prev, err := get("AWSPREVIOUS")
	require.NoError(t, err)
	assert.Equal(t, "two", prev, "AWSPREVIOUS is the version AWSCURRENT left")
	_, err = get("AWSPENDING")
	assertAPIError(t, err, "ResourceNotFoundException")
}

func assertAPIError(t *testing.T, err error, typ string) {
	t.Helper()
	var ae *apiError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, typ, ae.typ)
}
