package shell

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tetherjobs/tether/pkg/plugin/settings"
)

// Defaults for settings a job or the plugin config may leave out.
const (
	DefaultKillGrace = 10 * time.Second
	// DefaultMaxKillGrace is the longest kill_grace a job may ask for unless
	// config.max_kill_grace says otherwise. The agent counts it in its
	// self-fence arithmetic. A job stopped at the self-fence point may take
	// this long to die.
	DefaultMaxKillGrace = 10 * time.Second
	// defaultStateDirName is joined to os.TempDir() when config.state_dir is unset.
	defaultStateDirName = "tether-shell-state"
	// runIDEnv marks every process of a run so Cleanup can recognise the run's
	// process group after the process that started it is gone.
	runIDEnv = "TETHER_SHELL_RUN_ID"
)

// basePath is the PATH a job gets unless its env sets one. The plugin's own
// PATH is not used. Plugins start with a scrubbed environment, and a job must
// not depend on how the agent was launched.
const basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// spec is a validated job context.
type spec struct {
	Command        []string          // argv; empty when Script is set
	Script         string            // run by /bin/sh -c; empty when Command is set
	Env            map[string]string // explicit variables, added to the base env
	WorkingDir     string            // absolute; empty means a fresh per-job directory
	KeepWorkingDir bool
	KillGrace      time.Duration
	// RetryExitCodes are exit codes that mean "try again". The job fails
	// retriable (and is retried within its limits) instead of permanent.
	RetryExitCodes []int
}

// config is the plugin's validated section of the agent config.
type config struct {
	KillGrace    time.Duration // default for jobs that do not set kill_grace
	MaxKillGrace time.Duration // the most a job's kill_grace may be
	WorkRoot     string        // parent of per-job working directories
	StateDir     string        // where process-group records live
	RunAs        *account      // the user jobs run as; nil: the plugin's own
}

// account is the user config.run_as names, resolved.
type account struct {
	Name     string
	UID, GID uint32
	Groups   []uint32 // supplementary groups
	Home     string
}

var contextKeys = []string{"command", "env", "keep_working_dir", "kill_grace", "retry_exit_codes", "script", "working_dir"}

var configKeys = []string{"kill_grace", "max_kill_grace", "run_as", "state_dir", "work_root"}

// dec decodes settings. Its errors, like every error bad input produces, are
// permanent (retrying the same input cannot help) and carry no prefix. They
// start with the setting's name.
var dec = settings.Decoder{}

// field is one key of a settings table, with the parser that sets it in T.
type field[T any] struct {
	key    string
	decode func(dst *T, raw json.RawMessage) error
}

// decodeFields runs the parser of each key of table that is set in fields,
// in table order, and stops at the first error.
func decodeFields[T any](dst *T, fields settings.Fields, table []field[T]) error {
	for _, f := range table {
		if v, ok := fields.Get(f.key); ok {
			if err := f.decode(dst, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// configFields are the plugin config's keys, in the sorted order they are
// decoded in, each with the parser that sets it.
var configFields = []field[config]{
	{"kill_grace", func(c *config, v json.RawMessage) (err error) {
		c.KillGrace, err = parseGrace("config.kill_grace", v)
		return err
	}},
	{"max_kill_grace", func(c *config, v json.RawMessage) (err error) {
		c.MaxKillGrace, err = parseGrace("config.max_kill_grace", v)
		return err
	}},
	{"run_as", func(c *config, v json.RawMessage) (err error) {
		c.RunAs, err = parseRunAs("config.run_as", v, os.Geteuid(), lookupUser, (*user.User).GroupIds)
		return err
	}},
	{"state_dir", func(c *config, v json.RawMessage) (err error) {
		c.StateDir, err = parseAbsDir("config.state_dir", v)
		return err
	}},
	{"work_root", func(c *config, v json.RawMessage) (err error) {
		c.WorkRoot, err = parseAbsDir("config.work_root", v)
		return err
	}},
}

// parseConfig validates the plugin config. tempDir is os.TempDir(), passed in
// so defaults are decided in one place.
func parseConfig(raw json.RawMessage, tempDir string) (config, error) {
	cfg := config{
		KillGrace:    DefaultKillGrace,
		MaxKillGrace: DefaultMaxKillGrace,
		WorkRoot:     tempDir,
		StateDir:     filepath.Join(tempDir, defaultStateDirName),
	}
	fields, err := objectFields("config", raw, configKeys)
	if err != nil {
		return config{}, err
	}
	if err := decodeFields(&cfg, fields, configFields); err != nil {
		return config{}, err
	}
	if cfg.KillGrace > cfg.MaxKillGrace {
		return config{}, dec.Errorf("config.kill_grace: %s is above config.max_kill_grace (%s); the default grace must be allowed for every job: lower kill_grace or raise max_kill_grace",
			cfg.KillGrace, cfg.MaxKillGrace)
	}
	return cfg, nil
}

// parseSpec validates a job context. Defaults come from cfg.
func parseSpec(raw json.RawMessage, cfg config) (spec, error) {
	return decodeSpec(raw, cfg, true)
}

// specDraft is a spec being decoded, with the config that bounds it.
type specDraft struct {
	spec
	cfg config
}

// specFields are the job context's keys, in the order they are decoded in,
// each with the parser that sets it. A key set to null counts as unset, so a
// job can clear a command's default key (e.g. "command": null to run its own
// script instead).
var specFields = []field[specDraft]{
	{"command", func(d *specDraft, v json.RawMessage) (err error) {
		d.Command, err = parseCommand(v)
		return err
	}},
	{"script", func(d *specDraft, v json.RawMessage) (err error) {
		d.Script, err = parseScript(v)
		return err
	}},
	{"env", func(d *specDraft, v json.RawMessage) (err error) {
		d.Env, err = parseEnv(v)
		return err
	}},
	{"working_dir", func(d *specDraft, v json.RawMessage) (err error) {
		d.WorkingDir, err = parseAbsDir("context.working_dir", v)
		return err
	}},
	{"keep_working_dir", func(d *specDraft, v json.RawMessage) (err error) {
		d.KeepWorkingDir, err = dec.Bool("context.keep_working_dir", v)
		return err
	}},
	{"kill_grace", func(d *specDraft, v json.RawMessage) (err error) {
		d.KillGrace, err = parseJobGrace(v, d.cfg.MaxKillGrace)
		return err
	}},
	{"retry_exit_codes", func(d *specDraft, v json.RawMessage) (err error) {
		d.RetryExitCodes, err = parseExitCodes("context.retry_exit_codes", v)
		return err
	}},
}

// decodeSpec is parseSpec. With complete false it accepts a context that
// sets neither command nor script, as a command's default context may (its
// jobs bring their own), for Validate.
func decodeSpec(raw json.RawMessage, cfg config, complete bool) (spec, error) {
	d := specDraft{spec: spec{KillGrace: cfg.KillGrace}, cfg: cfg}
	fields, err := objectFields("context", raw, contextKeys)
	if err != nil {
		return spec{}, err
	}
	if err := checkProgram(fields, complete); err != nil {
		return spec{}, err
	}
	if err := decodeFields(&d, fields, specFields); err != nil {
		return spec{}, err
	}
	return d.spec, nil
}

// checkProgram refuses a context that sets both command and script, and,
// when complete, one that sets neither.
func checkProgram(fields settings.Fields, complete bool) error {
	_, hasCmd := fields.Get("command")
	_, hasScript := fields.Get("script")
	if hasCmd != hasScript {
		return nil // exactly one
	}
	if hasCmd {
		return dec.Errorf(`context: both command and script are set; set exactly one (a job can clear a default with "command": null or "script": null)`)
	}
	if complete {
		return dec.Errorf(`context: neither command nor script is set; set command: ["prog", "arg"] or script: "..."`)
	}
	return nil
}

// parseJobGrace reads context.kill_grace, which may be at most max.
func parseJobGrace(raw json.RawMessage, max time.Duration) (time.Duration, error) {
	grace, err := parseGrace("context.kill_grace", raw)
	if err != nil {
		return 0, err
	}
	if grace > max {
		return 0, dec.Errorf("context.kill_grace: %s is above the maximum %s (plugins.shell.config.max_kill_grace); ask for at most %s, or raise max_kill_grace in the agent's config",
			grace, max, max)
	}
	return grace, nil
}

// objectFields is settings' Object, with the shell plugin's own words for
// input that is not a JSON object at all.
func objectFields(what string, raw json.RawMessage, known []string) (settings.Fields, error) {
	if len(bytes.TrimSpace(raw)) > 0 && !settings.IsNull(raw) {
		if !json.Valid(raw) {
			return nil, dec.Errorf("%s: not valid JSON", what)
		}
		if kind := settings.Kind(raw); kind != "object" {
			return nil, dec.Errorf("%s: must be a JSON object, got %s", what, kind)
		}
	}
	return dec.Object(what, raw, known)
}

// decodeKind decodes raw when it is a JSON value of kind, as settings.Kind
// names it. raw comes from a valid JSON object, so only its kind can be
// wrong.
func decodeKind[T any](raw json.RawMessage, kind string) (T, bool) {
	var v T
	ok := settings.Kind(raw) == kind && json.Unmarshal(raw, &v) == nil
	return v, ok
}

func parseCommand(raw json.RawMessage) ([]string, error) {
	items, ok := decodeKind[[]json.RawMessage](raw, "array")
	if !ok {
		return nil, dec.Errorf(`context.command: must be a list of strings like ["prog", "arg"], got %s`, settings.Kind(raw))
	}
	if len(items) == 0 {
		return nil, dec.Errorf(`context.command: empty argv; set command: ["prog", "arg"] or script: "..."`)
	}
	argv := make([]string, len(items))
	for i, item := range items {
		if argv[i], ok = decodeKind[string](item, "string"); !ok {
			return nil, dec.Errorf("context.command[%d]: must be a string, got %s", i, settings.Kind(item))
		}
		if strings.ContainsRune(argv[i], 0) {
			return nil, dec.Errorf("context.command[%d]: contains a NUL byte", i)
		}
	}
	if strings.TrimSpace(argv[0]) == "" {
		return nil, dec.Errorf(`context.command[0]: empty program name; set command: ["prog", "arg"] or script: "..."`)
	}
	return argv, nil
}

func parseScript(raw json.RawMessage) (string, error) {
	script, ok := decodeKind[string](raw, "string")
	if !ok {
		return "", dec.Errorf(`context.script: must be a string of shell code, got %s`, settings.Kind(raw))
	}
	if strings.TrimSpace(script) == "" {
		return "", dec.Errorf(`context.script: empty; set script: "..." or command: ["prog", "arg"]`)
	}
	if strings.ContainsRune(script, 0) {
		return "", dec.Errorf("context.script: contains a NUL byte")
	}
	return script, nil
}

func parseEnv(raw json.RawMessage) (map[string]string, error) {
	items, ok := decodeKind[map[string]json.RawMessage](raw, "object")
	if !ok {
		return nil, dec.Errorf(`context.env: must be an object of strings like {"NAME": "value"}, got %s`, settings.Kind(raw))
	}
	env := make(map[string]string, len(items))
	for _, k := range slices.Sorted(maps.Keys(items)) {
		v := items[k]
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, dec.Errorf("context.env: invalid variable name %q; names must be non-empty without '=' or NUL", k)
		}
		if k == runIDEnv {
			return nil, dec.Errorf("context.env.%s: reserved; the plugin sets it to recognise the job's processes", k)
		}
		s, ok := decodeKind[string](v, "string")
		if !ok {
			return nil, dec.Errorf(`context.env.%s: must be a string, got %s (quote numbers and booleans: "1")`, k, settings.Kind(v))
		}
		if strings.ContainsRune(s, 0) {
			return nil, dec.Errorf("context.env.%s: contains a NUL byte", k)
		}
		env[k] = s
	}
	return env, nil
}

func parseGrace(field string, raw json.RawMessage) (time.Duration, error) {
	s, ok := decodeKind[string](raw, "string")
	if !ok {
		return 0, dec.Errorf(`%s: must be a duration string like "10s", got %s`, field, settings.Kind(raw))
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, dec.Errorf(`%s: %q is not a duration; use a Go duration like "10s" or "1m30s"`, field, s)
	}
	if d < 0 {
		return 0, dec.Errorf("%s: %q is negative; use 0 for an immediate SIGKILL or a positive duration", field, s)
	}
	return d, nil
}

func parseAbsDir(field string, raw json.RawMessage) (string, error) {
	s, ok := decodeKind[string](raw, "string")
	if !ok {
		return "", dec.Errorf("%s: must be a directory path string, got %s", field, settings.Kind(raw))
	}
	if s == "" || strings.ContainsRune(s, 0) || !filepath.IsAbs(s) {
		return "", dec.Errorf("%s: %q is not an absolute path; set an absolute directory like \"/srv/jobs\"", field, s)
	}
	return filepath.Clean(s), nil
}

// safeName turns a job ID into a file-name component. IDs are UUIDs in
// practice, but a plugin must not trust them to be safe path elements.
func safeName(id string) string {
	if len(id) > 0 && len(id) <= 100 && strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == "" {
		return id
	}
	return "h" + hashHex(id)
}

// describeArgv renders argv for messages.
func describeArgv(s spec) string {
	if s.Script != "" {
		return "script"
	}
	return fmt.Sprintf("command %q", s.Command[0])
}

// parseExitCodes reads a list of exit codes 1–255 (0 is success, never a
// failure to retry).
func parseExitCodes(what string, raw json.RawMessage) ([]int, error) {
	items, ok := decodeKind[[]json.RawMessage](raw, "array")
	if !ok {
		return nil, dec.Errorf("%s: must be a list of exit codes like [75], got %s", what, settings.Kind(raw))
	}
	codes := make([]int, 0, len(items))
	for i, item := range items {
		c, err := dec.Int(fmt.Sprintf("%s[%d]", what, i), item, 1, 255)
		if err != nil {
			return nil, err
		}
		codes = append(codes, c)
	}
	return codes, nil
}

// parseRunAs resolves config.run_as, a user name or numeric uid, with lookup
// and groupIDs (lookupUser and User.GroupIds). euid is the plugin's effective
// uid. Switching to another user needs root, so a non-root plugin may only
// name itself.
func parseRunAs(field string, raw json.RawMessage, euid int, lookup func(string) (*user.User, error), groupIDs func(*user.User) ([]string, error)) (*account, error) {
	name, ok := decodeKind[string](raw, "string")
	if !ok {
		return nil, dec.Errorf(`%s: must be a user name like "nobody", got %s`, field, settings.Kind(raw))
	}
	if strings.TrimSpace(name) == "" || strings.ContainsAny(name, "\x00:/") {
		return nil, dec.Errorf(`%s: %q is not a user name; set a user of this machine like "nobody", or remove run_as to run jobs as the agent's user`, field, name)
	}
	u, err := lookup(name)
	if err != nil {
		return nil, dec.Errorf("%s: no user %q on this machine (%v); create the user or name an existing one", field, name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if cmp.Or(err1, err2) != nil {
		return nil, dec.Errorf("%s: user %q has uid %q and gid %q, which are not numbers", field, name, u.Uid, u.Gid)
	}
	if euid != 0 && uint64(euid) != uid {
		return nil, dec.Errorf("%s: the agent runs as uid %d, not root, so it cannot run jobs as %s (uid %d); run the agent as root or remove run_as", field, euid, name, uid)
	}
	groups, err := groupIDs(u)
	if err != nil {
		return nil, dec.Errorf("%s: looking up the groups of user %q: %v", field, name, err)
	}
	a := &account{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
	for _, g := range groups {
		n, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return nil, dec.Errorf("%s: user %q has a group id %q that is not a number", field, name, g)
		}
		a.Groups = append(a.Groups, uint32(n))
	}
	return a, nil
}

// lookupUser finds a user by name, or by uid when s is a number.
func lookupUser(s string) (*user.User, error) {
	if _, err := strconv.ParseUint(s, 10, 32); err == nil {
		return user.LookupId(s)
	}
	return user.Lookup(s)
}
