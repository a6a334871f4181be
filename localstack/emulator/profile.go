package emulator

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Profiles: "kind" is every hostile behaviour off (the zero Options).
// "hostile" is HostileOptions.
const (
	ProfileKind    = "kind"
	ProfileHostile = "hostile"
)

// HostileOptions is the "hostile" profile. It does everything real ECS
// and CloudWatch Logs do to a client at once. Tests take it and tweak fields.
func HostileOptions() Options {
	return Options{
		ConsistencyWindow:     3 * time.Second,
		DeprovisionDelay:      30 * time.Second,
		LogLag:                1500 * time.Millisecond,
		RunTaskTransientRate:  0.05,
		CapacityErrorRate:     0.05,
		CapacityReasons:       AllCapacityReasons(),
		InfraStopRate:         0.02,
		ThrottleRate:          0, // the rate limiter throttles instead
		ServerErrorRate:       0.01,
		ServerErrorsAfterRun:  true,
		RateLimits:            true,
		TokenReplayAfterPurge: TokenReplayRelaunch,
	}
}

// ProfileOptions returns the options of a named profile.
func ProfileOptions(name string) (Options, error) {
	switch name {
	case "", ProfileKind:
		return Options{}, nil
	case ProfileHostile:
		return HostileOptions(), nil
	}
	return Options{}, fmt.Errorf("unknown profile %q: want %q or %q", name, ProfileKind, ProfileHostile)
}

// setting is one option settable by a flag and an environment variable.
type setting struct {
	flag, env, usage string
	isBool           bool
	set              func(o *Options, v string) error
}

func durationSetting(flag, env, usage string, field func(*Options) *time.Duration) setting {
	return setting{flag: flag, env: env, usage: usage, set: func(o *Options, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("want a non-negative Go duration such as 1.5s, got %q", v)
		}
		*field(o) = d
		return nil
	}}
}

func rateSetting(flag, env, usage string, field func(*Options) *float64) setting {
	return setting{flag: flag, env: env, usage: usage, set: func(o *Options, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f > 1 {
			return fmt.Errorf("want a fraction between 0 and 1, got %q", v)
		}
		*field(o) = f
		return nil
	}}
}

func boolSetter(field func(*Options) *bool) func(*Options, string) error {
	return func(o *Options, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		*field(o) = b
		return nil
	}
}

// capacityAliases are short names for the documented capacity reasons.
var capacityAliases = map[string][]string{
	"cpu": {ReasonResourceCPU}, "memory": {ReasonResourceMemory}, "agent": {ReasonAgent}, "fargate": {ReasonFargateCapacity}, "vcpu": {ReasonFargateVCPUQuota},
	"all": AllCapacityReasons(),
}

func settings() []setting {
	return []setting{
		durationSetting("stopped-retention", "TETHER_EMULATOR_STOPPED_RETENTION", "how long stopped tasks stay visible (default 1h)",
			func(o *Options) *time.Duration { return &o.StoppedRetention }),
		durationSetting("stop-timeout", "TETHER_EMULATOR_STOP_TIMEOUT", "SIGTERM to SIGKILL wait on StopTask (default 30s)",
			func(o *Options) *time.Duration { return &o.StopTimeout }),
		rateSetting("throttle-rate", "TETHER_EMULATOR_THROTTLE_RATE", "fraction of requests answered with ThrottlingException at random",
			func(o *Options) *float64 { return &o.ThrottleRate }),
		rateSetting("server-error-rate", "TETHER_EMULATOR_SERVER_ERROR_RATE", "fraction of requests answered with HTTP 500",
			func(o *Options) *float64 { return &o.ServerErrorRate }),
		{flag: "server-errors-after-run", env: "TETHER_EMULATOR_SERVER_ERRORS_AFTER_RUN", isBool: true,
			usage: "an injected HTTP 500 comes after the call ran, so its effects stand",
			set:   boolSetter(func(o *Options) *bool { return &o.ServerErrorsAfterRun })},
		durationSetting("latency", "TETHER_EMULATOR_LATENCY", "latency added to every request",
			func(o *Options) *time.Duration { return &o.Latency }),
		rateSetting("fail-to-start-rate", "TETHER_EMULATOR_FAIL_TO_START_RATE", "fraction of tasks stopping with TaskFailedToStart",
			func(o *Options) *float64 { return &o.FailToStartRate }),
		{flag: "fail-to-start-reasons", env: "TETHER_EMULATOR_FAIL_TO_START_REASONS",
			usage: "'|'-separated stopped reasons a failure to start picks from: literal reasons, or real (the FailToStart* ones: two transient, two not)",
			set:   setFailToStartReasons},
		rateSetting("capacity-error-rate", "TETHER_EMULATOR_CAPACITY_ERROR_RATE", "fraction of RunTask slots returned under failures",
			func(o *Options) *float64 { return &o.CapacityErrorRate }),
		{flag: "capacity-reasons", env: "TETHER_EMULATOR_CAPACITY_REASONS",
			usage: "comma-separated failure reasons capacity errors pick from: cpu, memory, agent, fargate, vcpu, all, or literal reasons (default cpu)",
			set:   setCapacityReasons},
		durationSetting("consistency-window", "TETHER_EMULATOR_CONSISTENCY_WINDOW", "a new task is MISSING from DescribeTasks and ListTasks for a random time up to this",
			func(o *Options) *time.Duration { return &o.ConsistencyWindow }),
		durationSetting("log-lag", "TETHER_EMULATOR_LOG_LAG", "each log event reaches GetLogEvents after a random delay up to this",
			func(o *Options) *time.Duration { return &o.LogLag }),
		durationSetting("log-stream-delay", "TETHER_EMULATOR_LOG_STREAM_DELAY", "each awslogs stream appears to readers this long after its first event",
			func(o *Options) *time.Duration { return &o.LogStreamDelay }),
		rateSetting("empty-log-page-rate", "TETHER_EMULATOR_EMPTY_LOG_PAGE_RATE", "fraction of GetLogEvents reads answered with an empty page and a new token mid-stream",
			func(o *Options) *float64 { return &o.EmptyLogPageRate }),
		rateSetting("run-task-transient-rate", "TETHER_EMULATOR_RUN_TASK_TRANSIENT_RATE", "fraction of RunTask calls failing with a transient error",
			func(o *Options) *float64 { return &o.RunTaskTransientRate }),
		rateSetting("infra-stop-rate", "TETHER_EMULATOR_INFRA_STOP_RATE", "fraction of running tasks stopped by the infrastructure",
			func(o *Options) *float64 { return &o.InfraStopRate }),
		durationSetting("infra-stop-delay", "TETHER_EMULATOR_INFRA_STOP_DELAY", "an infrastructure stop hits a random time up to this after RUNNING (default 10s)",
			func(o *Options) *time.Duration { return &o.InfraStopDelay }),
		{flag: "infra-stop-graceful", env: "TETHER_EMULATOR_INFRA_STOP_GRACEFUL", isBool: true,
			usage: "every infrastructure stop sends SIGTERM and reports the exit codes (else half lose the host)",
			set:   boolSetter(func(o *Options) *bool { return &o.InfraStopGraceful })},
		durationSetting("deprovision-delay", "TETHER_EMULATOR_DEPROVISION_DELAY", "a stopped task stays DEPROVISIONING (exit codes known) this long before STOPPED",
			func(o *Options) *time.Duration { return &o.DeprovisionDelay }),
		{flag: "started-by-only", env: "TETHER_EMULATOR_STARTED_BY_ONLY", isBool: true,
			usage: "ListTasks refuses startedBy with desiredStatus, and lists a startedBy's tasks of every status (the reference read literally)",
			set:   boolSetter(func(o *Options) *bool { return &o.StartedByOnly })},
		{flag: "rate-limits", env: "TETHER_EMULATOR_RATE_LIMITS", isBool: true,
			usage: "account-wide token buckets per API action",
			set:   boolSetter(func(o *Options) *bool { return &o.RateLimits })},
		{flag: "rate-limit", env: "TETHER_EMULATOR_RATE_LIMIT",
			usage: "Action=rate/burst (or Action=off; Action1+Action2 share a bucket), overriding a default figure; repeatable, comma-separated in the env",
			set:   addRateLimits},
		{flag: "token-replay-after-purge", env: "TETHER_EMULATOR_TOKEN_REPLAY_AFTER_PURGE",
			usage: "what a clientToken replay returns once its tasks are purged: missing or relaunch (default missing)",
			set: func(o *Options, v string) error {
				if !slices.Contains([]string{TokenReplayMissing, TokenReplayRelaunch}, v) {
					return fmt.Errorf("want %q or %q, got %q", TokenReplayMissing, TokenReplayRelaunch, v)
				}
				o.TokenReplayAfterPurge = v
				return nil
			}},
		{flag: "seed", env: "TETHER_EMULATOR_SEED", usage: "fault-injection random seed (0 = random)",
			set: func(o *Options, v string) error {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return fmt.Errorf("want an integer, got %q", v)
				}
				o.Seed = n
				return nil
			}},
	}
}

// setCapacityReasons reads capacity-reasons: aliases, "all", or literal
// reasons, comma-separated.
func setCapacityReasons(o *Options, v string) error {
	o.CapacityReasons = splitReasons(v, ",", capacityAliases)
	return nil
}

// splitReasons reads a list of reasons separated by sep. An alias stands
// for its reasons, and an empty entry for none.
func splitReasons(v, sep string, aliases map[string][]string) []string {
	var out []string
	for r := range strings.SplitSeq(v, sep) {
		r = strings.TrimSpace(r)
		switch {
		case aliases[r] != nil:
			out = append(out, aliases[r]...)
		case r != "":
			out = append(out, r)
		}
	}
	return out
}

// RealFailToStartReasons are the FailToStart* reasons, transient first.
func RealFailToStartReasons() []string {
	return []string{FailToStartPullRateLimit, FailToStartSecretTimeout, FailToStartNoImage, FailToStartSecretDenied}
}

// setFailToStartReasons reads '|'-separated reasons: the stopped reasons
// contain commas.
func setFailToStartReasons(o *Options, v string) error {
	o.FailToStartReasons = splitReasons(v, "|", map[string][]string{"real": RealFailToStartReasons()})
	return nil
}

// addRateLimits reads rate-limit entries, comma-separated, over the figures
// set so far.
func addRateLimits(o *Options, v string) error {
	for entry := range strings.SplitSeq(v, ",") {
		if strings.TrimSpace(entry) == "" {
			continue
		}
		key, l, err := ParseRateLimit(entry)
		if err != nil {
			return err
		}
		// A new map: the options may share the old one.
		figures := make(map[string]RateLimit, len(o.RateLimitFigures)+1)
		maps.Copy(figures, o.RateLimitFigures)
		figures[key] = l
		o.RateLimitFigures = figures
	}
	return nil
}

// ParseFlags registers the emulator's flags on fs, parses args and returns
// the options with the profile's name. Each layer overrides the one before:
// the profile (-profile, env TETHER_EMULATOR_PROFILE, default kind), then
// environment variables, then flags in command-line order.
func ParseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) (Options, string, error) {
	profile := getenv("TETHER_EMULATOR_PROFILE")
	fs.Func("profile", "kind (default) or hostile, the starting point the other settings change (env TETHER_EMULATOR_PROFILE)",
		func(v string) error { profile = v; return nil })
	all := settings()
	// Flag values are applied after the profile and the environment, in
	// the order given, so a repeated -rate-limit accumulates.
	var given []func(*Options) error
	for _, s := range all {
		apply := func(v string) error {
			given = append(given, func(o *Options) error { return s.apply(o, v, "-"+s.flag) })
			return nil
		}
		usage := s.usage + " (env " + s.env + ")"
		if s.isBool {
			fs.BoolFunc(s.flag, usage, apply)
		} else {
			fs.Func(s.flag, usage, apply)
		}
	}
	if err := fs.Parse(args); err != nil {
		return Options{}, "", err
	}
	if fs.NArg() > 0 {
		return Options{}, "", fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	profile = cmp.Or(profile, ProfileKind)
	opts, err := ProfileOptions(profile)
	if err != nil {
		return Options{}, "", err
	}
	errs := applyEnv(all, &opts, getenv)
	for _, apply := range given {
		errs = append(errs, apply(&opts))
	}
	if err := errors.Join(errs...); err != nil {
		return Options{}, "", err
	}
	return opts, profile, nil
}

// applyEnv applies the settings set in the environment to opts. Its
// errors are for errors.Join, which drops the nil ones.
func applyEnv(all []setting, opts *Options, getenv func(string) string) []error {
	var errs []error
	for _, s := range all {
		if v := getenv(s.env); v != "" {
			errs = append(errs, s.apply(opts, v, s.env))
		}
	}
	return errs
}

// apply sets v, naming where it came from (flag or variable) in an error.
func (s setting) apply(o *Options, v, from string) error {
	if err := s.set(o, v); err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	return nil
}

// LogValue renders the effective settings on one log line.
func (o Options) LogValue() slog.Value {
	o = o.withDefaults()
	limits := "off"
	if o.RateLimits {
		eff := EffectiveRateLimits(o.RateLimitFigures)
		parts := make([]string, 0, len(eff))
		for _, k := range slices.Sorted(maps.Keys(eff)) {
			parts = append(parts, k+"="+eff[k].String())
		}
		limits = strings.Join(parts, ",")
	}
	return slog.GroupValue(
		slog.Duration("stoppedRetention", o.StoppedRetention),
		slog.Duration("stopTimeout", o.StopTimeout),
		slog.Duration("consistencyWindow", o.ConsistencyWindow),
		slog.Duration("deprovisionDelay", o.DeprovisionDelay),
		slog.Duration("logLag", o.LogLag),
		slog.Float64("emptyLogPageRate", o.EmptyLogPageRate),
		slog.Float64("runTaskTransientRate", o.RunTaskTransientRate),
		slog.Float64("capacityErrorRate", o.CapacityErrorRate),
		slog.String("capacityReasons", strings.Join(capacityReasons(o.CapacityReasons), "|")),
		slog.Float64("infraStopRate", o.InfraStopRate),
		slog.Duration("infraStopDelay", o.InfraStopDelay),
		slog.Float64("failToStartRate", o.FailToStartRate),
		slog.Float64("throttleRate", o.ThrottleRate),
		slog.Float64("serverErrorRate", o.ServerErrorRate),
		slog.Bool("serverErrorsAfterRun", o.ServerErrorsAfterRun),
		slog.Duration("latency", o.Latency),
		slog.String("rateLimits", limits),
		slog.String("tokenReplayAfterPurge", o.TokenReplayAfterPurge),
		slog.Int64("seed", o.Seed),
	)
}
