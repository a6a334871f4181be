package shell

import (
	"context"
	"encoding/json"
	"os"
	"os/user"
	"strconv"
	"strings"
	"testing"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// requireRoot fails (never skips) a test that must switch users.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test needs root to switch users (run_as); it runs as uid %d", os.Geteuid())
	}
}

// runAsEnv is a test env whose work root the job's user can traverse
// (t.TempDir's directories are private to root).
func runAsEnv(t *testing.T) testEnv {
	t.Helper()
	root, err := os.MkdirTemp("", "tether-runas-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return testEnv{workRoot: root, stateDir: t.TempDir()}
}

func TestRunAsRunsJobAsThatUser(t *testing.T) {
	requireRoot(t)
	e := runAsEnv(t)
	job := e.job(t, map[string]any{"script": `id -u; id -g; echo "$HOME $USER $LOGNAME"; pwd; touch ./written && echo wrote`})
	job.Config = e.config(map[string]any{"run_as": "nobody"})
	rt := &fakeRuntime{}
	if _, err := New().Execute(context.Background(), job, rt); err != nil {
		t.Fatalf("Execute: %v (stderr %q)", err, rt.stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(rt.stdout.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("stdout = %q, want 5 lines", rt.stdout.String())
	}
	if lines[0] != "65534" || lines[1] != "65534" {
		t.Errorf("id -u, id -g = %s, %s; want 65534, 65534 (nobody)", lines[0], lines[1])
	}
	if lines[2] != "/nonexistent nobody nobody" {
		t.Errorf("HOME USER LOGNAME = %q, want nobody's", lines[2])
	}
	if !strings.HasPrefix(lines[3], e.workRoot+"/tether-shell-") {
		t.Errorf("working dir = %q, want a fresh directory under %s", lines[3], e.workRoot)
	}
	if lines[4] != "wrote" {
		t.Errorf("the job could not write its working directory: %q", lines[4])
	}
}

// A job run as another user cannot read the agent's environment (here the
// test process plays the agent: it runs as root and holds the secrets).
func TestRunAsCannotReadAgentEnviron(t *testing.T) {
	requireRoot(t)
	t.Setenv("DATABASE_URL", "postgres://tether:hunter2@db/tether")
	e := runAsEnv(t)
	agent := strconv.Itoa(os.Getpid())
	job := e.job(t, map[string]any{"script": `cat /proc/` + agent + `/environ`})
	job.Config = e.config(map[string]any{"run_as": "nobody"})
	rt := &fakeRuntime{}
	_, err := New().Execute(context.Background(), job, rt)
	pe := requireClass(t, err, plugin.Permanent)
	if !strings.Contains(pe.Message, "exited with code 1") || !strings.Contains(rt.stderr.String(), "Permission denied") {
		t.Errorf("reading /proc/%s/environ: error %q, stderr %q; want permission denied", agent, pe.Message, rt.stderr.String())
	}
	if strings.Contains(rt.stdout.String(), "hunter2") {
		t.Fatalf("the job read the agent's environment: %q", rt.stdout.String())
	}
}

// A job stopped by the host is stopped across the uid change. The plugin
// (root) signals the group of a process that is not its user's.
func TestRunAsCancelStopsGroup(t *testing.T) {
	requireRoot(t)
	e := runAsEnv(t)
	pidFile := e.workRoot + "/pid"
	if err := os.WriteFile(pidFile, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pidFile, 0o666); err != nil {
		t.Fatal(err)
	}
	job := e.job(t, map[string]any{"script": `sleep 1000 & echo $! > ` + pidFile + `; wait`, "kill_grace": "1s"})
	job.Config = e.config(map[string]any{"run_as": "nobody"})
	ctx, cancel := context.WithCancel(context.Background())
	ch := startExecute(ctx, New(), job, &fakeRuntime{})
	child := readPID(t, pidFile)
	cancel()
	r := waitResult(t, ch, killWait)
	requireClass(t, r.err, plugin.Retriable)
	if alive(child) {
		t.Errorf("the job's child %d (uid nobody) survived the cancel", child)
	}
}

func TestParseRunAs(t *testing.T) {
	users := map[string]*user.User{
		"nobody": {Username: "nobody", Uid: "65534", Gid: "65534", HomeDir: "/nonexistent"},
		"svc":    {Username: "svc", Uid: "1000", Gid: "1000", HomeDir: "/home/svc"},
	}
	lookup := func(name string) (*user.User, error) {
		if u, ok := users[name]; ok {
			return u, nil
		}
		return nil, user.UnknownUserError(name)
	}
	groups := func(u *user.User) ([]string, error) { return []string{u.Gid, "27"}, nil }
	for _, tc := range []struct {
		name    string
		raw     string
		euid    int
		wantUID uint32
		wantErr string
	}{
		{"root may switch", `"nobody"`, 0, 65534, ""},
		{"non-root may name itself", `"svc"`, 1000, 1000, ""},
		{"non-root may not switch", `"nobody"`, 1000, 0, "config.run_as: the agent runs as uid 1000, not root, so it cannot run jobs as nobody (uid 65534); run the agent as root or remove run_as"},
		{"unknown user", `"nosuch"`, 0, 0, `config.run_as: no user "nosuch" on this machine`},
		{"not a string", `65534`, 0, 0, `config.run_as: must be a user name like "nobody", got number`},
		{"empty", `""`, 0, 0, `config.run_as: "" is not a user name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := parseRunAs("config.run_as", json.RawMessage(tc.raw), tc.euid, lookup, groups)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if a.UID != tc.wantUID || a.GID != tc.wantUID || len(a.Groups) != 2 || a.Groups[1] != 27 {
				t.Errorf("account = %+v, want uid and gid %d and groups [%d 27]", a, tc.wantUID, tc.wantUID)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	p := New()
	for _, tc := range []struct {
		name     string
		config   string
		contexts map[string]string
		want     []plugin.Problem
	}{
		{"all good; a default context may leave the program to jobs", `{"kill_grace": "5s"}`,
			map[string]string{"a": `{"script": "echo"}`, "b": `{"env": {"X": "1"}}`, "c": `{}`}, nil},
		{"bad config field", `{"kill_grace": "soon"}`, map[string]string{"a": `{"script": "echo"}`},
			[]plugin.Problem{{Field: "kill_grace", Message: `"soon" is not a duration; use a Go duration like "10s" or "1m30s"`}}},
		{"unknown config key", `{"kill_grce": "1s"}`, nil,
			[]plugin.Problem{{Message: `unknown key "kill_grce"; known keys are kill_grace, max_kill_grace, run_as, state_dir, work_root`}}},
		{"unknown user", `{"run_as": "no-such-user-here"}`, nil,
			[]plugin.Problem{{Field: "run_as", Message: `no user "no-such-user-here" on this machine (user: unknown user no-such-user-here); create the user or name an existing one`}}},
		{"bad contexts, each named", `{}`, map[string]string{
			"ok":    `{"command": ["true"]}`,
			"empty": `{"command": []}`,
			"both":  `{"command": ["true"], "script": "true"}`,
			"grace": `{"script": "x", "kill_grace": "1h"}`,
			"env":   `{"script": "x", "env": {"N": 1}}`,
		}, []plugin.Problem{
			{Command: "both", Message: `both command and script are set; set exactly one (a job can clear a default with "command": null or "script": null)`},
			{Command: "empty", Field: "command", Message: `empty argv; set command: ["prog", "arg"] or script: "..."`},
			{Command: "env", Field: "env.N", Message: `must be a string, got number (quote numbers and booleans: "1")`},
			{Command: "grace", Field: "kill_grace", Message: `1h0m0s is above the maximum 10s (plugins.shell.config.max_kill_grace); ask for at most 10s, or raise max_kill_grace in the agent's config`},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			contexts := map[string]json.RawMessage{}
			for k, v := range tc.contexts {
				contexts[k] = json.RawMessage(v)
			}
			got, err := p.Validate(context.Background(), json.RawMessage(tc.config), contexts)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("problems = %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("problem %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}
