package ecs

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"golang.org/x/sync/singleflight"
)

// contentHashTag holds the hash of the template a task definition revision
// was registered from, so an unchanged template reuses the revision.
const contentHashTag = "tether:content-hash"

// taskDef is what the plugin needs to know about a task definition revision.
type taskDef struct {
	ARN        string
	Containers []tdContainer
}

type tdContainer struct {
	Name      string
	Essential bool
	LogGroup  string // awslogs group; "" when the container does not log to CloudWatch
	LogPrefix string // awslogs-stream-prefix
	LogRegion string // awslogs-region; "" = the tasks' region
}

// logged are the containers whose awslogs streams the plugin copies, in
// the task definition's order (the order of TaskState.Logs). Without a
// stream prefix awslogs names streams by container ID, which the plugin
// cannot know, so such containers are not followed.
func (td taskDef) logged() []tdContainer {
	var out []tdContainer
	for _, c := range td.Containers {
		if c.LogGroup != "" && c.LogPrefix != "" {
			out = append(out, c)
		}
	}
	return out
}

func (td taskDef) essential() map[string]bool {
	m := make(map[string]bool, len(td.Containers))
	for _, c := range td.Containers {
		m[c.Name] = c.Essential
	}
	return m
}

func newTaskDef(d *types.TaskDefinition) taskDef {
	td := taskDef{ARN: aws.ToString(d.TaskDefinitionArn)}
	for _, c := range d.ContainerDefinitions {
		tc := tdContainer{Name: aws.ToString(c.Name), Essential: c.Essential == nil || *c.Essential}
		if lc := c.LogConfiguration; lc != nil && lc.LogDriver == types.LogDriverAwslogs {
			tc.LogGroup = lc.Options["awslogs-group"]
			tc.LogPrefix = lc.Options["awslogs-stream-prefix"]
			tc.LogRegion = lc.Options["awslogs-region"]
		}
		td.Containers = append(td.Containers, tc)
	}
	return td
}

// decodeTemplate reads a task_definition_template into a RegisterTaskDefinition
// input. Field names are the API's (family, containerDefinitions, ...). A
// field the API does not have is an error, not silently dropped.
func decodeTemplate(raw json.RawMessage) (*ecs.RegisterTaskDefinitionInput, error) {
	var in ecs.RegisterTaskDefinitionInput
	jd := json.NewDecoder(bytes.NewReader(raw))
	jd.DisallowUnknownFields()
	if err := jd.Decode(&in); err != nil {
		return nil, dec.Errorf("task_definition_template: %v", err)
	}
	if aws.ToString(in.Family) == "" {
		return nil, dec.Errorf("task_definition_template: family is required")
	}
	if len(in.ContainerDefinitions) == 0 {
		return nil, dec.Errorf("task_definition_template: containerDefinitions is required")
	}
	return &in, nil
}

// templateInput is the registration the config asks for, with the roles from
// the config filled in where the template leaves them out, and its content
// hash (over everything but the hash tag itself).
func templateInput(c Config) (*ecs.RegisterTaskDefinitionInput, string, error) {
	in, err := decodeTemplate(c.Template)
	if err != nil {
		return nil, "", err
	}
	// The template's roles, else the config's.
	in.ExecutionRoleArn = cmp.Or(in.ExecutionRoleArn, optional(c.ExecutionRoleARN))
	in.TaskRoleArn = cmp.Or(in.TaskRoleArn, optional(c.TaskRoleARN))
	b, err := json.Marshal(in)
	if err != nil {
		return nil, "", dec.Errorf("task_definition_template: %v", err)
	}
	sum := sha256.Sum256(b)
	hash := hex.EncodeToString(sum[:])
	in.Tags = append(in.Tags, types.Tag{Key: aws.String(contentHashTag), Value: aws.String(hash)})
	return in, hash, nil
}

// optional is s as an optional API field: nil when s is "".
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// nameTTL is how long a family (or family:revision) name stays resolved to
// the revision it named. A bare family moves when a revision is
// registered, so it is looked up again after this.
const nameTTL = 30 * time.Second

// tdCache is the process's knowledge of task definitions for one region and
// endpoint: revisions by ARN (immutable, kept), names resolved recently, and
// template content hashes to the revision registered for them. Lookups and
// registrations of the same key are single-flight, so 60 jobs starting at
// once with one new template register one revision, not one each
// (RegisterTaskDefinition is throttled at about one call a second).
type tdCache struct {
	flight singleflight.Group

	mu    sync.Mutex
	byARN map[string]taskDef
	// byKey holds what "name:"+name and "hash:"+content hash resolved to.
	byKey map[string]resolvedTD
}

type resolvedTD struct {
	arn string
	at  time.Time
}

func newTDCache() *tdCache {
	return &tdCache{byARN: map[string]taskDef{}, byKey: map[string]resolvedTD{}}
}

func (c *tdCache) put(td taskDef) {
	c.mu.Lock()
	c.byARN[td.ARN] = td
	c.mu.Unlock()
}

func (c *tdCache) arn(arn string) (taskDef, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	td, ok := c.byARN[arn]
	return td, ok
}

// once runs load for key once for every caller that asks meanwhile. load
// returns the zero taskDef with its error.
func (c *tdCache) once(key string, load func() (taskDef, error)) (taskDef, error) {
	v, err, _ := c.flight.Do(key, func() (any, error) { return load() })
	return v.(taskDef), err
}

// resolve returns the revision key resolved to less than ttl ago. Else it
// runs load, once for every caller that asks meanwhile, and keeps what it
// returns.
func (c *tdCache) resolve(ctx context.Context, cl *clients, key string, ttl time.Duration, load func() (taskDef, error)) (taskDef, error) {
	c.mu.Lock()
	n, ok := c.byKey[key]
	c.mu.Unlock()
	if ok && time.Since(n.at) < ttl {
		return describeTaskDef(ctx, cl, n.arn)
	}
	return c.once(key, func() (taskDef, error) {
		td, err := load()
		if err != nil {
			return taskDef{}, err
		}
		c.mu.Lock()
		c.byARN[td.ARN] = td
		c.byKey[key] = resolvedTD{arn: td.ARN, at: time.Now()}
		c.mu.Unlock()
		return td, nil
	})
}

// forever is the time-to-live of a template's revision, which never changes.
const forever = time.Duration(math.MaxInt64)

// resolveTaskDef returns the revision the job runs: the named one, or the
// template's (registered only when no ACTIVE revision of its family carries
// the template's content hash as its latest).
func resolveTaskDef(ctx context.Context, cl *clients, c Config) (taskDef, error) {
	if c.Template == nil {
		return resolveName(ctx, cl, c.TaskDefinition)
	}
	in, hash, err := templateInput(c)
	if err != nil {
		return taskDef{}, err
	}
	return cl.tds.resolve(ctx, cl, "hash:"+hash, forever, func() (taskDef, error) {
		return registerTemplate(ctx, cl, in, hash)
	})
}

func resolveName(ctx context.Context, cl *clients, name string) (taskDef, error) {
	if strings.HasPrefix(name, "arn:") {
		return describeTaskDef(ctx, cl, name)
	}
	return cl.tds.resolve(ctx, cl, "name:"+name, nameTTL, func() (taskDef, error) {
		return fetchTaskDef(ctx, cl, name, fmt.Sprintf("describing task definition %q", name))
	})
}

// registerTemplate returns the family's latest revision when it was
// registered from the same template (its content hash tag), else registers
// a new revision.
func registerTemplate(ctx context.Context, cl *clients, in *ecs.RegisterTaskDefinitionInput, hash string) (taskDef, error) {
	family := aws.ToString(in.Family)
	td, ok, err := registeredTemplate(ctx, cl, family, hash)
	if err != nil || ok {
		return td, err
	}
	// No revision yet (a client error: the family does not exist), or the
	// template changed. Register a new revision.
	if err := cl.wait(ctx, apiRegisterTaskDefinition); err != nil {
		return taskDef{}, err
	}
	out, err := cl.ecs.RegisterTaskDefinition(ctx, in)
	if err != nil {
		return taskDef{}, classify(fmt.Sprintf("registering task definition family %q", family), err)
	}
	return newTaskDef(out.TaskDefinition), nil
}

// registeredTemplate describes the family's latest revision and reports
// whether it is ACTIVE and tagged with hash. A family ECS does not know
// (a client error) is not an error.
func registeredTemplate(ctx context.Context, cl *clients, family, hash string) (taskDef, bool, error) {
	if err := cl.wait(ctx, apiDescribeTaskDefinition); err != nil {
		return taskDef{}, false, err
	}
	latest, err := cl.ecs.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{
		TaskDefinition: aws.String(family),
		Include:        []types.TaskDefinitionField{types.TaskDefinitionFieldTags},
	})
	switch {
	case err != nil && !clientFault(err):
		return taskDef{}, false, classify(fmt.Sprintf("describing task definition family %q", family), err)
	case err != nil || latest.TaskDefinition == nil || latest.TaskDefinition.Status != types.TaskDefinitionStatusActive:
		return taskDef{}, false, nil
	}
	if tagValue(latest.Tags, contentHashTag) != hash {
		return taskDef{}, false, nil
	}
	return newTaskDef(latest.TaskDefinition), true, nil
}

// describeTaskDef loads a revision by ARN, once per process.
func describeTaskDef(ctx context.Context, cl *clients, arn string) (taskDef, error) {
	if td, ok := cl.tds.arn(arn); ok {
		return td, nil
	}
	return cl.tds.once("arn:"+arn, func() (taskDef, error) {
		return fetchTaskDef(ctx, cl, arn, fmt.Sprintf("describing task definition %s", arn))
	})
}

// fetchTaskDef describes the task definition name (a family, revision or
// ARN) and keeps the revision by ARN. what names the call in its error.
func fetchTaskDef(ctx context.Context, cl *clients, name, what string) (taskDef, error) {
	if err := cl.wait(ctx, apiDescribeTaskDefinition); err != nil {
		return taskDef{}, err
	}
	out, err := cl.ecs.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String(name)})
	if err != nil {
		return taskDef{}, classify(what, err)
	}
	td := newTaskDef(out.TaskDefinition)
	cl.tds.put(td)
	return td, nil
}
