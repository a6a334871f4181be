package deploy

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/awsops"
	"github.com/tetherjobs/tether/internal/image"
)

// policies are the IAM policies of the task role, each with the program
// whose AWS calls it must allow.
var policies = []struct{ file, main string }{
	{"iam/ecs-plugin-policy.json", "./plugins/ecs"},
	{"iam/sparkeks-plugin-policy.json", "./plugins/sparkeks"},
	{"iam/agent-policy.json", "./cmd/agent"},
}

// iamPrefix is the IAM service prefix of each aws-sdk-go-v2 service package.
var iamPrefix = map[string]string{
	"ecs": "ecs", "cloudwatchlogs": "logs", "eks": "eks", "sts": "sts", "secretsmanager": "secretsmanager",
}

// unauthorized are operations IAM does not authorize: "No permissions are
// required to perform this operation" (STS API reference, GetCallerIdentity;
// the sparkeks plugin only presigns it, and EKS calls it to authenticate the
// plugin).
var unauthorized = map[string]bool{"sts:GetCallerIdentity": true}

// dependent are the other actions an operation needs, from the Service
// Authorization Reference for Amazon ECS ("API operations" table): RunTask
// passes the task definition's task and execution roles (iam:PassRole,
// iam:PassedToService ecs-tasks.amazonaws.com); RunTask and
// RegisterTaskDefinition with tags need ecs:TagResource (ecs:CreateAction).
// field, when set, is the input field whose use brings the action in.
// https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonelasticcontainerservice.html
var dependent = []struct {
	op     awsops.Op
	field  string
	action string
}{
	{awsops.Op{Service: "ecs", Operation: "RunTask"}, "", "iam:PassRole"},
	{awsops.Op{Service: "ecs", Operation: "RunTask"}, "Tags", "ecs:TagResource"},
	{awsops.Op{Service: "ecs", Operation: "RegisterTaskDefinition"}, "Tags", "ecs:TagResource"},
}

// requiredActions are the IAM actions a program's calls need, each with
// where it comes from.
func requiredActions(t *testing.T, uses awsops.Uses) map[string][]string {
	t.Helper()
	need := map[string][]string{}
	for _, op := range uses.Ops() {
		prefix, ok := iamPrefix[op.Service]
		require.True(t, ok, "the code calls %s (%v): add the IAM prefix of service package %q to iamPrefix", op, uses[op].Calls, op.Service)
		action := prefix + ":" + op.Operation
		if !unauthorized[action] {
			need[action] = append(need[action], uses[op].Calls...)
		}
		for _, d := range dependent {
			if d.op == op && (d.field == "" || uses[op].Sets[d.field]) {
				need[d.action] = append(need[d.action], action+" at "+strings.Join(uses[op].Calls, ", "))
			}
		}
	}
	return need
}

type policy struct {
	Version   string
	Statement []statement
}

type statement struct {
	Sid       string
	Effect    string
	Action    strings_
	Resource  strings_
	Condition map[string]map[string]strings_
}

// strings_ is an IAM string-or-list value.
type strings_ []string

func (s *strings_) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = []string{one}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(s))
}

func readPolicy(t *testing.T, file string) policy {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var p policy
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&p), file)
	require.Equal(t, "2012-10-17", p.Version, file)
	return p
}

// actions are the policy's allowed actions, each with its statement.
func (p policy) actions() map[string]statement {
	out := map[string]statement{}
	for _, s := range p.Statement {
		for _, a := range s.Action {
			out[a] = s
		}
	}
	return out
}

// loadUses finds the AWS operations of main, type-checked with the image's
// build flags so the test shares the image build's compiled packages.
func loadUses(t *testing.T, main string) awsops.Uses {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	uses, err := awsops.Load(ctx, goCommand(t), "..", image.BuildEnv(nil, runtime.GOARCH), image.BuildFlags(), main)
	require.NoError(t, err)
	return uses
}

// goCommand is the go command that runs this test.
func goCommand(t *testing.T) string {
	t.Helper()
	g := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(g); err != nil {
		t.Fatalf("the go command is not at %s (GOROOT of this test): %v", g, err)
	}
	return g
}

// The actions each policy allows are exactly those the program's code
// needs: every AWS operation its packages call (found by type, see
// internal/awsops), mapped to its IAM action, plus the actions those
// operations depend on. An action the code does not need is as much a
// failure as one it lacks.
func TestIAMPolicyActionsAreTheCodesOperations(t *testing.T) {
	for _, pc := range policies {
		t.Run(filepath.Base(pc.file), func(t *testing.T) {
			need := requiredActions(t, loadUses(t, pc.main))
			have := readPolicy(t, pc.file).actions()
			for _, a := range sortedKeys(need) {
				if _, ok := have[a]; !ok {
					t.Errorf("%s lacks %s, which the code of %s needs: %s", pc.file, a, pc.main, strings.Join(need[a], "; "))
				}
			}
			for _, a := range sortedKeys(have) {
				if _, ok := need[a]; !ok {
					t.Errorf("%s allows %s (statement %q), which no code of %s needs: remove it", pc.file, a, have[a].Sid, pc.main)
				}
			}
		})
	}
}

// The ECS plugin's policy scopes what can be scoped: the cluster (ecs:cluster
// condition) for the task calls, the roles it may pass and to whom, tagging
// only at creation, and its log groups. No wildcard action, no Deny to
// reason about.
func TestIAMPolicyScopesTheECSPlugin(t *testing.T) {
	p := readPolicy(t, "iam/ecs-plugin-policy.json")
	acts := p.actions()
	for _, s := range p.Statement {
		assert.Equal(t, "Allow", s.Effect, s.Sid)
		for _, a := range s.Action {
			assert.NotContains(t, a, "*", "statement %q: name actions one by one", s.Sid)
		}
	}
	for _, a := range []string{"ecs:RunTask", "ecs:DescribeTasks", "ecs:ListTasks", "ecs:StopTask"} {
		require.Contains(t, acts, a)
		cluster := acts[a].Condition["ArnEquals"]["ecs:cluster"]
		assert.Len(t, cluster, 1, "%s: scope it to the jobs' cluster with ArnEquals ecs:cluster", a)
		for _, c := range cluster {
			assert.Regexp(t, `^arn:aws:ecs:[a-z0-9-]+:\d{12}:cluster/[A-Za-z0-9_-]+$`, c, a)
		}
	}
	assert.Equal(t, strings_{"ecs-tasks.amazonaws.com"}, acts["iam:PassRole"].Condition["StringEquals"]["iam:PassedToService"])
	for _, r := range acts["iam:PassRole"].Resource {
		assert.Regexp(t, `^arn:aws:iam::\d{12}:role/[^*]+$`, r, "iam:PassRole names the roles, no wildcard")
	}
	assert.ElementsMatch(t, strings_{"RunTask", "RegisterTaskDefinition"}, acts["ecs:TagResource"].Condition["StringEquals"]["ecs:CreateAction"])
	assert.Equal(t, strings_{"arn:aws:ecs:eu-west-1:123456789012:cluster/batch"}, acts["ecs:DescribeClusters"].Resource)
	for _, a := range []string{"logs:GetLogEvents", "logs:StartLiveTail"} {
		for _, r := range acts[a].Resource {
			assert.True(t, strings.HasPrefix(r, "arn:aws:logs:"), "%s: scoped to the jobs' log groups, got %s", a, r)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return slices.Clip(keys)
}
