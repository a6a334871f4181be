// Package plugin is tether's public SDK for plugin authors and the host side of
// the plugin protocol.
//
// A plugin is a separate binary whose main calls Serve with an implementation
// of Plugin and, optionally, Resumer, Cleaner and HealthChecker. The agent runs
// the binary through hashicorp/go-plugin over gRPC and discovers what it can do
// from Info, never by calling and catching Unimplemented. (Validate is the one
// call a host makes regardless. A plugin built before it existed answers
// Unimplemented, which means "nothing to check".)
package plugin

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"time"
)

// ProtocolVersion is the newest version of the gRPC protocol this SDK
// speaks. It is bumped on any incompatible change to the protocol. Features
// added within a version are announced instead (HostInfo.Features).
const ProtocolVersion = 1

// ProtocolVersions are every protocol version this SDK speaks, newest
// first: a plugin built with it serves each of them, and an agent built
// with it accepts each of them. An SDK that moves to a new version keeps
// serving the old one for a while, so a plugin and an agent one release
// apart still agree on one.
func ProtocolVersions() []int { return []int{ProtocolVersion} }

// Capabilities a plugin declares in Info.
const (
	CapResume  = "resume"  // implements Resumer
	CapCleanup = "cleanup" // implements Cleaner
	CapHealth  = "health"  // implements HealthChecker
)

// Info describes a plugin. Serve fills Capabilities from the interfaces the
// implementation satisfies. A plugin only sets Name and Version.
type Info struct {
	Name         string
	Version      string
	Capabilities []string
}

// Has reports whether the plugin declared capability c.
func (i Info) Has(c string) bool { return slices.Contains(i.Capabilities, c) }

// Job is what a plugin is asked to run.
type Job struct {
	ID      string // stable across attempts and resumes; derive remote names from it
	Command string // the configured command name
	Attempt int    // 1 for the first run, +1 per retry
	// Context is the command's default context merged with the job's own
	// (top-level keys of the job win).
	Context json.RawMessage
	// Config is the plugin's own section of the agent config (plugins.<name>.config).
	Config json.RawMessage
	// Handle is set only for Cleanup. It is the last handle the attempt
	// that left the remote work checkpointed (nil if it never did), so
	// Cleanup can
	// stop what was launched where it was launched. Execute and Resume read
	// theirs from Runtime.Handle.
	Handle []byte
}

// Result is a successful outcome.
type Result struct {
	Output  json.RawMessage // stored as the job's result (JSON); may be nil
	Message string          // short human summary, recorded in the final event
}

// Runtime is the host's side of a running job, reached over the go-plugin
// broker. Every call is fenced by the job's lease on the host. After the lease
// is lost, writes fail and the job's context is cancelled.
type Runtime interface {
	Stdout() io.Writer
	Stderr() io.Writer
	// Checkpoint stores handle as the job's resumable state. Resume receives it
	// through Handle. Call it as soon as remote work exists.
	Checkpoint(ctx context.Context, handle []byte) error
	// Handle is the last checkpointed handle (nil if none).
	Handle() []byte
}

// MaxHandleBytes is the largest handle a plugin may checkpoint. A handle
// crosses gRPC (whose messages stop at 4 MiB) and is stored in the job's
// active row, which every heartbeat and claim of the job touches. Keep the
// handle to what Resume needs to find the work (IDs, positions), never the
// work's output.
const MaxHandleBytes = 1 << 20

// CheckHandle refuses a handle larger than MaxHandleBytes, with a permanent
// error saying so. The SDK checks every Checkpoint with it, and
// plugintest's direct mode does too, so a test sees what the agent would.
func CheckHandle(handle []byte) error {
	if len(handle) > MaxHandleBytes {
		return Errorf(Permanent, "checkpoint refused: the handle is %d bytes, above plugin.MaxHandleBytes (%d); keep in it only what Resume needs to find the work", len(handle), MaxHandleBytes)
	}
	return nil
}

// Plugin is implemented by every plugin.
type Plugin interface {
	Info(ctx context.Context) (Info, error)
	// Execute starts the job's work and returns when it has ended. It must
	// return promptly when ctx is cancelled, stopping work it cannot leave
	// behind.
	Execute(ctx context.Context, job *Job, rt Runtime) (*Result, error)
}

// Resumer is implemented by plugins whose work outlives the agent watching it.
// Resume reattaches to work an earlier Execute or Resume started, found by
// names derived from job.ID and rt.Handle(), and follows it to the end.
type Resumer interface {
	Resume(ctx context.Context, job *Job, rt Runtime) (*Result, error)
}

// Cleaner stops and deletes whatever remote work a job left. It must be
// idempotent. It may be called more than once, and for work that never started.
type Cleaner interface {
	Cleanup(ctx context.Context, job *Job) error
}

// HealthChecker reports whether the plugin can reach what it drives.
type HealthChecker interface {
	HealthCheck(ctx context.Context, config json.RawMessage) error
}

// Validator is implemented by plugins that can check their settings before
// any job runs. The agent calls Validate once at start with the plugin's
// config and the default context of every command that uses the plugin, and
// refuses to start if any problem is reported, naming
// plugins.<name>.config.<field> or commands.<command>.context.<field>.
//
// Validate checks shape and values only, with the same parsing Execute uses
// so the two cannot disagree. It must not call remote services (the agent
// must start while a cluster is unreachable). A command's context is its
// default only. Jobs merge their own context over it, so a setting a job may
// still supply (an ECS task definition, a Spark query) must not be required.
// A plugin that does not implement Validator has nothing checked.
type Validator interface {
	Validate(ctx context.Context, config json.RawMessage, contexts map[string]json.RawMessage) ([]Problem, error)
}

// KillGracer is implemented by plugins whose jobs do local work that takes
// time to stop after a cancel (the shell plugin gives a job's processes its
// kill_grace between SIGTERM and SIGKILL). MaxKillGrace returns the longest
// such a stop may take under config, the plugin's section of the agent's
// config. The agent asks once at start, along with Validate, and counts the
// answer in its self-fence point and its drain. A plugin that does not
// implement KillGracer counts as stopping at once, unless its config sets
// max_kill_grace.
type KillGracer interface {
	MaxKillGrace(config json.RawMessage) (time.Duration, error)
}

// Problem is one thing Validate found wrong.
type Problem struct {
	// Command names the command whose context is wrong. It is empty for the
	// plugin's config.
	Command string
	// Field is the setting's dotted path inside the config or the context
	// ("task_count", "network_configuration.subnets"). It is empty when the
	// problem is about the whole section.
	Field   string
	Message string
}

// Key is where the problem is in the agent's config:
// plugins.<plugin>.config.<field> or commands.<command>.context.<field>.
func (p Problem) Key(pluginName string) string {
	key := "plugins." + pluginName + ".config"
	if p.Command != "" {
		key = "commands." + p.Command + ".context"
	}
	if p.Field != "" {
		key += "." + p.Field
	}
	return key
}

// Resource is one remote thing a job's handle points at, as a person would
// look for it: an ECS task, a log stream, a Spark application.
type Resource struct {
	// Kind says what it is: "ecs_task", "cloudwatch_log_stream",
	// "spark_application", "kubernetes_pod", ….
	Kind string
	// Name identifies it stably (a task ARN, "namespace/name").
	Name string
	// Label is short human text ("ECS task 0").
	Label string
	// URL is a web console link to it, when one can be built. Else "".
	URL string
	// Command is a shell command a person can paste to inspect it. Else "".
	Command string
}

// Describer is implemented by plugins that can say which remote resources
// a handle of theirs points at. The plugin SDK calls Describe with every
// Checkpoint and sends the resources with it. The agent records them on the
// job (an event of kind remote, when they changed) and the API and console
// show them. Plugin authors' Execute and Resume do not change.
//
// Describe must be a pure, cheap function of job and a handle the plugin
// itself wrote: no remote calls, no blocking, since it runs on every
// checkpoint. A handle it cannot read yields nil.
type Describer interface {
	Describe(job *Job, handle []byte) []Resource
}

// DescribedCheckpointer is implemented by a host's Runtime that records the
// resources a plugin described along with its checkpoint. The host's side
// of the protocol calls CheckpointDescribed instead of Checkpoint when the
// plugin sent a description, and Checkpoint when it did not (no Describer,
// or an older SDK).
type DescribedCheckpointer interface {
	CheckpointDescribed(ctx context.Context, handle []byte, resources []Resource) error
}
