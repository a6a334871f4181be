package ecs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
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
		}
		td.Containers = append(td.Containers, tc)
	}
	return td
}

// decodeTemplate reads a task_definition_template into a RegisterTaskDefinition
// input. Field names are the API's (family, containerDefinitions, ...); a
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
	if in.ExecutionRoleArn == nil && c.ExecutionRoleARN != "" {
		in.ExecutionRoleArn = aws.String(c.ExecutionRoleARN)
	}
	if in.TaskRoleArn == nil && c.TaskRoleARN != "" {
		in.TaskRoleArn = aws.String(c.TaskRoleARN)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, "", dec.Errorf("task_definition_template: %v", err)
	}
	sum := sha256.Sum256(b)
	hash := hex.EncodeToString(sum[:])
	in.Tags = append(in.Tags, types.Tag{Key: aws.String(contentHashTag), Value: aws.String(hash)})
	return in, hash, nil
}

// resolveTaskDef returns the revision the job runs: the named one, or the
// template's (registered only when no ACTIVE revision of its family carries
// the template's content hash as its latest).
func resolveTaskDef(ctx context.Context, cl *clients, c Config) (taskDef, error) {
	if c.Template == nil {
		out, err := cl.ecs.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String(c.TaskDefinition)})
		if err != nil {
			return taskDef{}, classify(fmt.Sprintf("describing task definition %q", c.TaskDefinition), err)
		}
		return newTaskDef(out.TaskDefinition), nil
	}
	in, hash, err := templateInput(c)
	if err != nil {
		return taskDef{}, err
	}
	family := aws.ToString(in.Family)
	latest, err := cl.ecs.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{
		TaskDefinition: aws.String(family),
		Include:        []types.TaskDefinitionField{types.TaskDefinitionFieldTags},
	})
	switch {
	case err == nil && latest.TaskDefinition != nil && latest.TaskDefinition.Status == types.TaskDefinitionStatusActive:
		for _, t := range latest.Tags {
			if aws.ToString(t.Key) == contentHashTag && aws.ToString(t.Value) == hash {
				return newTaskDef(latest.TaskDefinition), nil
			}
		}
	case err != nil && !clientFault(err):
		return taskDef{}, classify(fmt.Sprintf("describing task definition family %q", family), err)
	}
	// No revision yet (a client error: the family does not exist), or the
	// template changed: register a new revision.
	out, err := cl.ecs.RegisterTaskDefinition(ctx, in)
	if err != nil {
		return taskDef{}, classify(fmt.Sprintf("registering task definition family %q", family), err)
	}
	return newTaskDef(out.TaskDefinition), nil
}

// describeTaskDef loads a revision by ARN (on resume).
func describeTaskDef(ctx context.Context, cl *clients, arn string) (taskDef, error) {
	out, err := cl.ecs.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String(arn)})
	if err != nil {
		return taskDef{}, classify(fmt.Sprintf("describing task definition %s", arn), err)
	}
	return newTaskDef(out.TaskDefinition), nil
}
