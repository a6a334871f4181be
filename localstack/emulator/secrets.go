package emulator

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// AWS Secrets Manager, the part the agent uses: CreateSecret, PutSecretValue
// (what a rotation ends with) and GetSecretValue, over the JSON 1.1 protocol
// (X-Amz-Target: secretsmanager.<Operation>).
//
// Modelled from the API reference:
//   - A secret is named by its name, its full ARN, or a partial ARN (without
//     the 6 random characters AWS appends); anything else is
//     ResourceNotFoundException, "Secrets Manager can't find the specified
//     secret."
//   - Each value is a version (VersionId, a UUID-like string, or the
//     ClientRequestToken given) with staging labels. GetSecretValue returns
//     AWSCURRENT unless VersionId or VersionStage says otherwise; a label or
//     version the secret does not have is ResourceNotFoundException.
//   - PutSecretValue gives the new version AWSCURRENT (unless
//     VersionStages says otherwise) and moves AWSPREVIOUS to the version that
//     had AWSCURRENT. The same ClientRequestToken with the same value is
//     idempotent; with another value it is ResourceExistsException.
//   - A name that exists is ResourceExistsException on CreateSecret.
//
// https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_GetSecretValue.html
// https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_PutSecretValue.html
// https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_CreateSecret.html
// https://docs.aws.amazon.com/secretsmanager/latest/userguide/whats-in-a-secret.html (versions and staging labels)

const secretsTargetPrefix = "secretsmanager."

const (
	stageCurrent  = "AWSCURRENT"
	stagePrevious = "AWSPREVIOUS"
)

// secretStore holds the secrets, with a lock of its own.
type secretStore struct {
	mu   sync.Mutex
	seq  int
	byID map[string]*secret // by name
}

type secret struct {
	name, arn string
	versions  []*secretVersion
}

type secretVersion struct {
	id      string
	value   string
	stages  []string
	created time.Time
}

func newSecretStore() *secretStore { return &secretStore{byID: map[string]*secret{}} }

func (e *Emulator) secretsOps() map[string]func([]byte) (any, error) {
	s := e.secrets
	return map[string]func([]byte) (any, error){
		"CreateSecret":   op(s.createSecret),
		"PutSecretValue": op(s.putSecretValue),
		"GetSecretValue": op(s.getSecretValue),
	}
}

func secretNotFound() error {
	return errf("ResourceNotFoundException", "Secrets Manager can't find the specified secret.")
}

// lookup finds a secret by name, full ARN or partial ARN. It needs s.mu.
func (s *secretStore) lookup(id string) (*secret, error) {
	if id == "" {
		return nil, invalidParam("You must provide a value for the SecretId parameter.")
	}
	if sec := s.byID[id]; sec != nil {
		return sec, nil
	}
	for _, sec := range s.byID {
		if id == sec.arn || id == sec.arn[:len(sec.arn)-len("-AbCdEf")] {
			return sec, nil
		}
	}
	return nil, secretNotFound()
}

// newVersionID is the next version ID (AWS uses UUIDs; these are as
// opaque and unique). It needs s.mu.
func (s *secretStore) newVersionID() string {
	s.seq++
	return fmt.Sprintf("00000000-0000-4000-8000-%012d", s.seq)
}

func (s *secretStore) createSecret(req struct {
	Name               string
	SecretString       *string
	ClientRequestToken string
	Description        string
}) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Name == "" || strings.ContainsAny(req.Name, " \t") {
		return nil, invalidParam("Invalid name. Must be a valid name containing alphanumeric characters, or any of the following: -/_+=.@!")
	}
	if s.byID[req.Name] != nil {
		return nil, errf("ResourceExistsException", "The operation failed because the secret %s already exists.", req.Name)
	}
	sec := s.newSecret(req.Name)
	out := map[string]any{"ARN": sec.arn, "Name": sec.name}
	if req.SecretString != nil {
		v := s.addVersion(sec, req.ClientRequestToken, *req.SecretString, nil)
		out["VersionId"] = v.id
	}
	return out, nil
}

// randomSuffix is the 6 characters AWS appends to a secret's ARN.
func randomSuffix(n int) string {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	b := make([]byte, 6)
	for i := range b {
		b[i] = chars[(n*7919+i*104729)%len(chars)]
	}
	return string(b)
}

// addVersion adds a version with stages (nil: AWSCURRENT), moving AWSCURRENT
// and AWSPREVIOUS as PutSecretValue does. It needs s.mu.
func (s *secretStore) addVersion(sec *secret, token, value string, stages []string) *secretVersion {
	if stages == nil {
		stages = []string{stageCurrent}
	}
	id := token
	if id == "" {
		id = s.newVersionID()
	}
	if slices.Contains(stages, stageCurrent) {
		for _, v := range sec.versions {
			v.stages = slices.DeleteFunc(v.stages, func(st string) bool { return st == stagePrevious })
		}
		for _, v := range sec.versions {
			if slices.Contains(v.stages, stageCurrent) {
				v.stages = append(slices.DeleteFunc(v.stages, func(st string) bool { return st == stageCurrent }), stagePrevious)
			}
		}
	}
	for _, v := range sec.versions { // a label is on one version at a time
		v.stages = slices.DeleteFunc(v.stages, func(st string) bool { return st != stagePrevious && slices.Contains(stages, st) })
	}
	v := &secretVersion{id: id, value: value, stages: slices.Clone(stages), created: time.Now()}
	sec.versions = append(sec.versions, v)
	return v
}

func (s *secretStore) putSecretValue(req struct {
	SecretId           string
	SecretString       *string
	ClientRequestToken string
	VersionStages      []string
}) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, err := s.lookup(req.SecretId)
	if err != nil {
		return nil, err
	}
	if req.SecretString == nil {
		return nil, invalidParam("You must provide either SecretString or SecretBinary.")
	}
	for _, v := range sec.versions {
		if req.ClientRequestToken != "" && v.id == req.ClientRequestToken {
			if v.value != *req.SecretString {
				return nil, errf("ResourceExistsException", "You can't modify an existing version, you can only create a new version.")
			}
			return map[string]any{"ARN": sec.arn, "Name": sec.name, "VersionId": v.id, "VersionStages": v.stages}, nil
		}
	}
	v := s.addVersion(sec, req.ClientRequestToken, *req.SecretString, req.VersionStages)
	return map[string]any{"ARN": sec.arn, "Name": sec.name, "VersionId": v.id, "VersionStages": v.stages}, nil
}

func (s *secretStore) getSecretValue(req struct {
	SecretId     string
	VersionId    string
	VersionStage string
}) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, err := s.lookup(req.SecretId)
	if err != nil {
		return nil, err
	}
	stage := req.VersionStage
	if stage == "" && req.VersionId == "" {
		stage = stageCurrent
	}
	for _, v := range sec.versions {
		if (req.VersionId == "" || v.id == req.VersionId) && (stage == "" || slices.Contains(v.stages, stage)) {
			return map[string]any{
				"ARN": sec.arn, "Name": sec.name, "VersionId": v.id, "SecretString": v.value,
				"VersionStages": v.stages, "CreatedDate": float64(v.created.UnixMilli()) / 1000,
			}, nil
		}
	}
	return nil, errf("ResourceNotFoundException", "Secrets Manager can't find the specified secret value for VersionId: %s, staging label: %s", req.VersionId, stage)
}

// PutSecret stores value as the AWSCURRENT version of secret name, creating
// it if needed, as a test's setup (CreateSecret or PutSecretValue without a
// client).
func (e *Emulator) PutSecret(name, value string) {
	s := e.secrets
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := s.byID[name]
	if sec == nil {
		sec = s.newSecret(name)
	}
	s.addVersion(sec, "", value, nil)
}

// newSecret adds a secret without versions. It needs s.mu.
func (s *secretStore) newSecret(name string) *secret {
	s.seq++
	sec := &secret{name: name, arn: fmt.Sprintf("arn:aws:secretsmanager:%s:%s:secret:%s-%s", region, account, name, randomSuffix(s.seq))}
	s.byID[name] = sec
	return sec
}
