package shell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherjobs/tether/pkg/plugin"
)

func TestExecuteValidationErrors(t *testing.T) {
	e := newTestEnv(t)
	cases := []struct {
		name, context, config, want string
	}{
		{"empty object", `{}`, ``, `context: neither command nor script is set; set command: ["prog", "arg"] or script: "..."`},
		{"null context", `null`, ``, `context: neither command nor script`},
		{"no context", ``, ``, `context: neither command nor script`},
		{"empty argv", `{"command": []}`, ``, `context.command: empty argv; set command: ["prog", "arg"] or script: "..."`},
		{"empty program", `{"command": [""]}`, ``, `context.command[0]: empty program name`},
		{"command as string", `{"command": "echo hi"}`, ``, `context.command: must be a list of strings like ["prog", "arg"], got string`},
		{"non-string arg", `{"command": ["echo", 1]}`, ``, `context.command[1]: must be a string, got number`},
		{"NUL in arg", `{"command": ["echo", "a\u0000b"]}`, ``, `context.command[1]: contains a NUL byte`},
		{"both", `{"command": ["echo"], "script": "echo"}`, ``, `context: both command and script are set; set exactly one`},
		{"script number", `{"script": 5}`, ``, `context.script: must be a string of shell code, got number`},
		{"blank script", `{"script": "  \n"}`, ``, `context.script: empty`},
		{"env list", `{"script": "x", "env": ["A=1"]}`, ``, `context.env: must be an object of strings like {"NAME": "value"}, got array`},
		{"env number", `{"script": "x", "env": {"A": 1}}`, ``, `context.env.A: must be a string, got number`},
		{"env bad name", `{"script": "x", "env": {"A=B": "1"}}`, ``, `context.env: invalid variable name "A=B"`},
		{"env empty name", `{"script": "x", "env": {"": "1"}}`, ``, `context.env: invalid variable name ""`},
		{"env reserved", `{"script": "x", "env": {"TETHER_SHELL_RUN_ID": "1"}}`, ``, `context.env.TETHER_SHELL_RUN_ID: reserved`},
		{"grace word", `{"script": "x", "kill_grace": "soon"}`, ``, `context.kill_grace: "soon" is not a duration; use a Go duration like "10s"`},
		{"grace number", `{"script": "x", "kill_grace": 10}`, ``, `context.kill_grace: must be a duration string like "10s", got number`},
		{"grace negative", `{"script": "x", "kill_grace": "-1s"}`, ``, `context.kill_grace: "-1s" is negative`},
		{"relative dir", `{"script": "x", "working_dir": "rel/dir"}`, ``, `context.working_dir: "rel/dir" is not an absolute path`},
		{"missing dir", `{"script": "x", "working_dir": "/nonexistent/tether/dir"}`, ``, `context.working_dir: /nonexistent/tether/dir is not an existing directory`},
		{"keep not bool", `{"script": "x", "keep_working_dir": "yes"}`, ``, `context.keep_working_dir: must be true or false, got string`},
		{"retry codes not list", `{"script": "x", "retry_exit_codes": 75}`, ``, `context.retry_exit_codes: must be a list of exit codes like [75], got number`},
		{"retry code zero", `{"script": "x", "retry_exit_codes": [75, 0]}`, ``, `context.retry_exit_codes[1]: `},
		{"retry code too big", `{"script": "x", "retry_exit_codes": [256]}`, ``, `context.retry_exit_codes[0]: `},
		{"unknown key", `{"script": "x", "comand": ["a"]}`, ``, `context: unknown key "comand"; known keys are command, env, keep_working_dir, kill_grace, retry_exit_codes, script, working_dir`},
		{"array context", `[1, 2]`, ``, `context: must be a JSON object, got array`},
		{"string context", `"echo"`, ``, `context: must be a JSON object, got string`},
		{"broken JSON", `{"script":`, ``, `context: not valid JSON`},
		{"config grace", `{"script": "x"}`, `{"kill_grace": "x"}`, `config.kill_grace: "x" is not a duration`},
		{"config unknown", `{"script": "x"}`, `{"bogus": 1}`, `config: unknown key "bogus"; known keys are kill_grace, max_kill_grace, run_as, state_dir, work_root`},
		{"grace above default max", `{"script": "x", "kill_grace": "11s"}`, ``, `context.kill_grace: 11s is above the maximum 10s (plugins.shell.config.max_kill_grace); ask for at most 10s, or raise max_kill_grace`},
		{"grace above configured max", `{"script": "x", "kill_grace": "2s"}`, `{"kill_grace": "1s", "max_kill_grace": "1500ms"}`, `context.kill_grace: 2s is above the maximum 1.5s (plugins.shell.config.max_kill_grace)`},
		{"config max below grace", `{"script": "x"}`, `{"max_kill_grace": "5s"}`, `config.kill_grace: 10s is above config.max_kill_grace (5s)`},
		{"config max word", `{"script": "x"}`, `{"max_kill_grace": "long"}`, `config.max_kill_grace: "long" is not a duration`},
		{"config relative", `{"script": "x"}`, `{"state_dir": "state"}`, `config.state_dir: "state" is not an absolute path`},
		{"config not object", `{"script": "x"}`, `true`, `config: must be a JSON object, got boolean`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			job := &plugin.Job{ID: "v-" + randomHex()[:8], Attempt: 1, Context: json.RawMessage(tc.context), Config: e.config(nil)}
			if tc.config != "" {
				job.Config = json.RawMessage(tc.config)
			}
			p := New()
			p.tempDir = dir
			res, err := p.Execute(context.Background(), job, &fakeRuntime{})
			if res != nil {
				t.Fatalf("got a result %+v for invalid input", res)
			}
			pe := requireClass(t, err, plugin.Permanent)
			if !strings.HasPrefix(pe.Message, tc.want) {
				t.Errorf("message = %q\nwant prefix  %q", pe.Message, tc.want)
			}
		})
	}
}

func TestNullClearsADefault(t *testing.T) {
	// The host merges the command's default context with the job's. A job
	// replaces a default command with its own script by nulling the command.
	s, err := parseSpec(json.RawMessage(`{"command": null, "script": "echo hi", "env": null}`), config{KillGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if s.Script != "echo hi" || s.Command != nil || s.KillGrace != time.Second {
		t.Fatalf("spec = %+v", s)
	}
}

func TestDefaultsAndOverrides(t *testing.T) {
	cfg, err := parseConfig(nil, "/tmpdir")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.KillGrace != 10*time.Second || cfg.MaxKillGrace != 10*time.Second || cfg.WorkRoot != "/tmpdir" || cfg.StateDir != "/tmpdir/tether-shell-state" {
		t.Fatalf("defaults = %+v", cfg)
	}
	cfg, err = parseConfig(json.RawMessage(`{"kill_grace": "3s", "work_root": "/w/", "state_dir": "/s"}`), "/tmpdir")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.KillGrace != 3*time.Second || cfg.WorkRoot != "/w" || cfg.StateDir != "/s" {
		t.Fatalf("config = %+v", cfg)
	}
	s, err := parseSpec(json.RawMessage(`{"script": "x"}`), cfg)
	if err != nil || s.KillGrace != 3*time.Second {
		t.Fatalf("spec %+v, %v: want the config's kill_grace", s, err)
	}
	s, err = parseSpec(json.RawMessage(`{"script": "x", "kill_grace": "0"}`), cfg)
	if err != nil || s.KillGrace != 0 {
		t.Fatalf("spec %+v, %v: want the context's kill_grace", s, err)
	}
	s, err = parseSpec(json.RawMessage(`{"script": "x", "kill_grace": "10s"}`), cfg)
	if err != nil || s.KillGrace != 10*time.Second {
		t.Fatalf("spec %+v, %v: a kill_grace equal to the default max_kill_grace is allowed", s, err)
	}
	cfg, err = parseConfig(json.RawMessage(`{"kill_grace": "2m", "max_kill_grace": "5m"}`), "/tmpdir")
	if err != nil || cfg.KillGrace != 2*time.Minute || cfg.MaxKillGrace != 5*time.Minute {
		t.Fatalf("config %+v, %v: want max_kill_grace raised above the default", cfg, err)
	}
	s, err = parseSpec(json.RawMessage(`{"script": "x", "kill_grace": "5m"}`), cfg)
	if err != nil || s.KillGrace != 5*time.Minute {
		t.Fatalf("spec %+v, %v: a kill_grace up to a raised max_kill_grace is allowed", s, err)
	}
	if _, err := parseSpec(json.RawMessage(`{"script": "x", "kill_grace": "5m1s"}`), cfg); err == nil ||
		!strings.Contains(err.Error(), "context.kill_grace: 5m1s is above the maximum 5m0s") {
		t.Fatalf("err = %v: want the raised maximum enforced", err)
	}
}

// TestParseNeverPanics throws many malformed inputs at the parsers. Every one
// must end in a value or a permanent *plugin.Error, never a panic.
func TestParseNeverPanics(t *testing.T) {
	values := []string{
		`null`, `true`, `0`, `-1`, `1e309`, `""`, `"x"`, `"\u0000"`, `"10s"`, `"-5m"`, `"/abs"`, `"rel"`,
		`[]`, `[""]`, `["echo"]`, `[1]`, `[null]`, `[["a"]]`, `{}`, `{"A":"1"}`, `{"A":1}`, `{"":""}`, `{"=":""}`,
		`"` + strings.Repeat("a", 5000) + `"`, `"\ud800"`, `"\xff"`,
	}
	keys := append(append([]string{}, contextKeys...), "unknown", "", "Command")
	rng := rand.New(rand.NewPCG(1, 2))
	inputs := []string{``, `{`, `}`, `[`, `{"script"}`, `{"script":"a",}`, "\xff\xfe", `{"a":1}{"b":2}`, strings.Repeat(`[`, 10000)}
	for i := 0; i < 3000; i++ {
		n := rng.IntN(4)
		parts := make([]string, 0, n)
		for j := 0; j < n; j++ {
			parts = append(parts, fmt.Sprintf("%q: %s", keys[rng.IntN(len(keys))], values[rng.IntN(len(values))]))
		}
		inputs = append(inputs, "{"+strings.Join(parts, ", ")+"}")
	}
	for _, in := range inputs {
		checkParse(t, in)
	}
}

func checkParse(t *testing.T, in string) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic on %q: %v", in, r)
		}
	}()
	for _, err := range []error{
		func() error { _, err := parseSpec(json.RawMessage(in), config{}); return err }(),
		func() error { _, err := parseConfig(json.RawMessage(in), "/tmp"); return err }(),
	} {
		if err == nil {
			continue
		}
		var pe *plugin.Error
		if !errors.As(err, &pe) || pe.Class != plugin.Permanent || pe.Message == "" {
			t.Fatalf("input %q: error %v is not a permanent plugin error", in, err)
		}
	}
}

func FuzzParseSpec(f *testing.F) {
	f.Add(`{"command": ["echo", "hi"], "env": {"A": "b"}}`)
	f.Add(`{"script": "exit 1", "kill_grace": "1s", "working_dir": "/tmp"}`)
	f.Add(`{"command": []}`)
	f.Fuzz(func(t *testing.T, in string) { checkParse(t, in) })
}

func TestExecuteRejectsBadJobs(t *testing.T) {
	p := New()
	_, err := p.Execute(context.Background(), nil, &fakeRuntime{})
	requireClass(t, err, plugin.Permanent)
	_, err = p.Execute(context.Background(), &plugin.Job{ID: "x", Context: []byte(`{"script":"true"}`)}, nil)
	requireClass(t, err, plugin.Permanent)
	_, err = p.Execute(context.Background(), &plugin.Job{ID: "", Context: []byte(`{"script":"true"}`)}, &fakeRuntime{})
	requireClass(t, err, plugin.Permanent)
	requireClass(t, p.Cleanup(context.Background(), nil), plugin.Permanent)
}

func TestSafeName(t *testing.T) {
	if got := safeName("0191e2a4-7c3b-7def-8a12-3456789abcde"); got != "0191e2a4-7c3b-7def-8a12-3456789abcde" {
		t.Errorf("a UUID should be used as is, got %q", got)
	}
	for _, id := range []string{"../../etc/passwd", "a.b", "x*", strings.Repeat("a", 101), "a/b"} {
		got := safeName(id)
		if strings.ContainsAny(got, "./*") || len(got) > 100 || got == "" {
			t.Errorf("safeName(%q) = %q is not a safe file name", id, got)
		}
	}
	if safeName("a/b") == safeName("a_b") {
		t.Error("distinct IDs map to one name")
	}
}

func TestParseStat(t *testing.T) {
	p, err := parseStat([]byte("1234 (we ird) (name)) S 1 777 777 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 98765 0 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.State != 'S' || p.PGID != 777 || p.StartTime != 98765 {
		t.Fatalf("parsed %+v", p)
	}
	for _, bad := range []string{"", "1 (x", "1 (x) S 1 2", "1 (x) S 1 notanumber 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) succeeded", bad)
		}
	}
	self, err := readProc(os.Getpid())
	if err != nil || self.PGID <= 0 || self.StartTime == 0 || self.dead() {
		t.Fatalf("readProc(self) = %+v, %v", self, err)
	}
}

func TestTailBuffer(t *testing.T) {
	var tb tailBuffer
	for i := 1; i <= 5000; i++ {
		fmt.Fprintf(&tb, "line %d\n", i)
	}
	got := tb.lines(3)
	if strings.Join(got, "|") != "line 4998|line 4999|line 5000" {
		t.Errorf("lines = %q", got)
	}
	if len(tb.buf) > 2*tailBytes {
		t.Errorf("buffer grew to %d bytes", len(tb.buf))
	}
	var long tailBuffer
	long.Write([]byte(strings.Repeat("é", 1000) + "\nbad \xff byte\r\n\n"))
	got = long.lines(10)
	if len(got) != 2 || len(got[0]) > tailLineMax+len(tailEllipsis) || got[1] != "bad \uFFFD byte" {
		t.Errorf("lines = %q", got)
	}
	for _, l := range got {
		if !strings.HasSuffix(l, tailEllipsis) && l != "bad \uFFFD byte" {
			t.Errorf("unexpected line %q", l)
		}
	}
}

func TestHealthCheck(t *testing.T) {
	e := newTestEnv(t)
	p := New()
	p.tempDir = t.TempDir() // where the default config points
	if err := p.HealthCheck(context.Background(), e.config(nil)); err != nil {
		t.Fatalf("HealthCheck: %v", err)
	}
	if err := p.HealthCheck(context.Background(), nil); err != nil {
		t.Fatalf("HealthCheck with default config: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(p.tempDir, "tether-shell-state")); err != nil || !fi.IsDir() {
		t.Errorf("HealthCheck did not prepare the default state dir: %v", err)
	}
	err := p.HealthCheck(context.Background(), e.config(map[string]any{"work_root": filepath.Join(e.workRoot, "missing")}))
	if err == nil || !strings.Contains(err.Error(), "config.work_root") {
		t.Fatalf("HealthCheck with a missing work_root: %v", err)
	}
	if err := p.HealthCheck(context.Background(), json.RawMessage(`{"kill_grace": 5}`)); err == nil {
		t.Fatal("HealthCheck accepted an invalid config")
	}
}

// The decoding tables and the lists of accepted keys are kept apart. Every
// key must have a decoder.
func TestEveryKeyHasADecoder(t *testing.T) {
	var config, context []string
	for _, f := range configFields {
		config = append(config, f.key)
	}
	for _, f := range specFields {
		context = append(context, f.key)
	}
	slices.Sort(config)
	slices.Sort(context)
	if !slices.Equal(config, configKeys) {
		t.Errorf("config decoders %v, want one for each of %v", config, configKeys)
	}
	if !slices.Equal(context, contextKeys) {
		t.Errorf("context decoders %v, want one for each of %v", context, contextKeys)
	}
}
