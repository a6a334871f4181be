package ecs

import (
	"cmp"
	"fmt"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/tetherjobs/tether/pkg/plugin"
)

var _ plugin.Describer = (*Plugin)(nil)

// Describe implements plugin.Describer. It describes one ecs_task per task
// index with a task, and the CloudWatch log stream of each of its awslogs
// containers when the job's task definition is a template in its config or
// context (a task definition named by family or ARN would need a
// DescribeTaskDefinition call, which Describe must not make). It reads only
// job and handle.
func (p *Plugin) Describe(job *plugin.Job, handle []byte) []plugin.Resource {
	h, err := decodeHandle(handle)
	if err != nil {
		return nil
	}
	return describeHandle(h, templateLogs(job))
}

// templateLogs are the awslogs containers of the job's task definition
// template, in the order run.track follows them. It is nil without a template.
func templateLogs(job *plugin.Job) []tdContainer {
	c, err := parseConfig(job.Config, job.Context)
	if err != nil || c.Template == nil {
		return nil
	}
	in, err := decodeTemplate(c.Template)
	if err != nil {
		return nil
	}
	return newTaskDef(&types.TaskDefinition{ContainerDefinitions: in.ContainerDefinitions}).logged()
}

func describeHandle(h *Handle, logged []tdContainer) []plugin.Resource {
	var out []plugin.Resource
	for i := range h.Tasks {
		t := &h.Tasks[i]
		arn := h.taskARN(t)
		if arn == "" {
			continue // its RunTask has not answered yet
		}
		a, ok := parseTaskARN(arn) // the zero taskARN when !ok
		cluster := cmp.Or(a.Cluster, h.Cluster)
		label := fmt.Sprintf("ECS task %d", i)
		if len(t.Prev) > 0 {
			label += fmt.Sprintf(" (previous: %d)", len(t.Prev))
		}
		cmd := "aws ecs describe-tasks"
		if ok {
			cmd += " --region " + plugin.ShellQuote(a.Region)
		}
		cmd += " --cluster " + plugin.ShellQuote(cluster) + " --tasks " + plugin.ShellQuote(arn)
		out = append(out, plugin.Resource{Kind: "ecs_task", Name: arn, Label: label, URL: a.consoleURL(cluster), Command: cmd})
		if !ok {
			continue // the log streams' region is not known
		}
		for _, c := range logged {
			out = append(out, logStream(a, c, fmt.Sprintf("Logs of task %d, container %s", i, c.Name)))
		}
	}
	return out
}

// taskARN is a parsed ECS task ARN. The ECS API reference's "Amazon
// Resource Names" gives arn:<partition>:ecs:<region>:<account>:task/<cluster>/<id>,
// and the older arn:<partition>:ecs:<region>:<account>:task/<id> (no cluster)
// of accounts that did not opt in to the long ARN format.
type taskARN struct {
	Partition, Region, Account, Cluster, ID string
}

// taskARNPattern matches both forms of a task ARN. The cluster may be
// empty, the ID may not, and only the first five fields exclude ":".
var taskARNPattern = regexp.MustCompile(`^arn:([^:]+):ecs:([^:]+):([^:]+):task/(?:([^/]*)/)?([^/]+)$`)

func parseTaskARN(arn string) (taskARN, bool) {
	m := taskARNPattern.FindStringSubmatch(arn)
	if m == nil {
		return taskARN{}, false
	}
	return taskARN{Partition: m[1], Region: m[2], Account: m[3], Cluster: m[4], ID: m[5]}, true
}

// consoleHost is the AWS console's host for region, in the commercial
// partition only. The console's URLs are not an API contract, and those of
// aws-cn and aws-us-gov (other hosts, other paths) are not checked here, so
// tasks there get no URL. A parsed ARN has a region, the zero taskARN no
// partition.
func (a taskARN) consoleHost(region string) string {
	if a.Partition != "aws" {
		return ""
	}
	return "https://" + region + ".console.aws.amazon.com"
}

// consoleURL is the task's page in the ECS console ("" where unknown). A
// parsed ARN has an ID, and the zero taskARN no host.
func (a taskARN) consoleURL(cluster string) string {
	host := a.consoleHost(a.Region)
	if host == "" || cluster == "" {
		return ""
	}
	return host + "/ecs/v2/clusters/" + consolePath(cluster) + "/tasks/" + consolePath(a.ID) + "/configuration?region=" + a.Region
}

// logStream describes one awslogs stream of task a, named as run.track
// names it: <prefix>/<container>/<task id>.
func logStream(a taskARN, c tdContainer, label string) plugin.Resource {
	region := cmp.Or(c.LogRegion, a.Region)
	stream := c.LogPrefix + "/" + c.Name + "/" + a.ID
	r := plugin.Resource{
		Kind: "cloudwatch_log_stream",
		// The stream's ARN, as the CloudWatch Logs API reference spells it.
		Name:  "arn:" + a.Partition + ":logs:" + region + ":" + a.Account + ":log-group:" + c.LogGroup + ":log-stream:" + stream,
		Label: label,
		Command: "aws logs tail " + plugin.ShellQuote(c.LogGroup) + " --log-stream-names " + plugin.ShellQuote(stream) +
			" --region " + plugin.ShellQuote(region) + " --follow",
	}
	if host := a.consoleHost(region); host != "" {
		r.URL = host + "/cloudwatch/home?region=" + region + "#logsV2:log-groups/log-group/" +
			cloudWatchEscape(c.LogGroup) + "/log-events/" + cloudWatchEscape(stream)
	}
	return r
}

// consolePath percent-encodes s for one path segment of a console URL.
func consolePath(s string) string { return escapeURI(s, "%%%02X") }

// cloudWatchEscape encodes a log group or stream name as the CloudWatch
// console's fragment routes read it: JavaScript's encodeURIComponent
// applied twice, with the outer "%" written "$" ("/" is "$252F").
func cloudWatchEscape(s string) string { return escapeURI(s, "$25%02X") }

// unreservedURI is what encodeURIComponent leaves as it is.
const unreservedURI = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!~*'()"

// escapeURI writes each byte of s outside unreservedURI with format.
func escapeURI(s, format string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; strings.IndexByte(unreservedURI, c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, format, c)
		}
	}
	return b.String()
}
