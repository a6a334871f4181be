package sparkeks

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/validate/content"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/tetherjobs/tether/pkg/plugin/settings"
)

// Defaults for settings neither the plugin config, the template nor the job sets.
const (
	DefaultNamespace    = "default"
	DefaultSparkVersion = "3.5.3"
	DefaultType         = "Python"
	DefaultMode         = "cluster"
	DefaultTimeout      = 5 * time.Hour
	DefaultPollInterval = 10 * time.Second
	DefaultUnknownGrace = 5 * time.Minute
	// DefaultAuthGrace is how long the API server may refuse the plugin's
	// requests (401/403: an expired or not yet propagated EKS token, an
	// access entry being replaced) before a job stops following its
	// application.
	DefaultAuthGrace = 5 * time.Minute
	// DefaultStartupTimeout is how long an application may take from its
	// creation to RUNNING (image pull, scheduling) before it counts as stuck.
	DefaultStartupTimeout = 15 * time.Minute
	// DefaultTimeToLive is spec.timeToLiveSeconds. It is how long the operator
	// keeps a terminated application (counted from its terminationTime).
	DefaultTimeToLive = 24 * time.Hour
	// MinTimeToLive bounds time_to_live from below. A dead agent's job waits
	// stale_job (default 120 s) to be resumed, plus the resume itself. An
	// application the TTL deleted before its outcome was checkpointed ends
	// the job outcome_unknown.
	MinTimeToLive         = 10 * time.Minute
	DefaultQueryMountPath = "/etc/tether/spark-sql"
	// QueryFileToken in arguments is replaced by the mounted query's path.
	QueryFileToken = "{query_file}"
	// QueryKey is the ConfigMap key holding the query. It is the file's name in
	// query_mount_path.
	QueryKey = "query.sql"
)

// defaultArguments are the application's arguments when neither the
// settings nor the template give any.
func defaultArguments() []string { return []string{"--query-file", QueryFileToken} }

// Keys accepted in plugins.sparkeks.config and in a job's context.
var (
	accessKeys = []string{"aws_endpoint", "context", "eks_ca_data", "eks_cluster", "eks_endpoint", "in_cluster", "kubeconfig", "region"}
	appKeys    = []string{
		"arguments", "driver", "executor", "hadoop_conf", "image", "image_pull_policy", "labels",
		"main_application_file", "main_class", "mode", "namespace", "poll_interval", "query_mount_path",
		"service_account", "spark_conf", "spark_version", "template", "timeout", "type", "unknown_grace",
		"auth_grace", "startup_timeout", "time_to_live",
	}
	// query is the job's own. It is refused in the plugin config.
	configKeys  = slices.Sorted(slices.Values(append(slices.Clone(accessKeys), appKeys...)))
	contextKeys = slices.Sorted(slices.Values(append(slices.Clone(configKeys), "query")))

	driverKeys   = []string{"core_limit", "cores", "labels", "memory"}
	executorKeys = []string{"core_limit", "cores", "instances", "labels", "memory"}
	// mergedKeys are merged key by key (config, then context) instead of
	// replaced. So are the labels inside driver and executor.
	mergedKeys = []string{"driver", "driver.labels", "executor", "executor.labels", "hadoop_conf", "labels", "spark_conf"}
)

// Access is how the plugin reaches the cluster's API server. Exactly one of
// Kubeconfig, InCluster and EKSCluster is set. It is comparable. The client
// cache is keyed by it.
type Access struct {
	Kubeconfig string
	Context    string
	InCluster  bool
	EKSCluster string
	Region     string
	// EKSEndpoint and EKSCAData are both set or both empty. Empty, they are
	// looked up with EKS DescribeCluster.
	EKSEndpoint string
	EKSCAData   string // base64, as in a kubeconfig's certificate-authority-data
	// AWSEndpoint overrides the endpoint of STS (presigning) and EKS
	// (DescribeCluster). Empty leaves it to the SDK (AWS_ENDPOINT_URL, ...).
	AWSEndpoint string
}

// Resources are the driver's or the executors' settings. Zero values are unset.
type Resources struct {
	Cores     int
	CoreLimit string
	Memory    string
	Instances int // executors only
	Labels    map[string]string
}

// Config is a job's validated, merged settings. Empty strings and nil slices
// are unset. The template's value, or the default, applies.
type Config struct {
	Access              Access
	Namespace           string
	Image               string
	ImagePullPolicy     string
	ServiceAccount      string
	SparkVersion        string
	Type                string
	Mode                string
	MainApplicationFile string
	MainClass           string
	Arguments           []string // nil: unset
	Template            map[string]any
	SparkConf           map[string]string
	HadoopConf          map[string]string
	Driver              Resources
	Executor            Resources
	Labels              map[string]string
	Timeout             time.Duration // 0 disables
	PollInterval        time.Duration
	UnknownGrace        time.Duration
	AuthGrace           time.Duration
	StartupTimeout      time.Duration // 0 disables
	TimeToLive          time.Duration
	QueryMountPath      string
	Query               string
}

// QueryFile is where the driver finds the query.
func (c Config) QueryFile() string { return path.Join(c.QueryMountPath, QueryKey) }

// dec decodes the plugin's settings. Its errors start "sparkeks: ".
var dec = settings.Decoder{Prefix: "sparkeks: "}

// parseConfig merges the plugin config with the job's context and validates
// the result. Context keys replace config keys, except driver, executor,
// labels, spark_conf and hadoop_conf, which are merged key by key (the
// context wins). A null value unsets a key.
func parseConfig(rawConfig, rawContext json.RawMessage) (Config, error) {
	c, err := decodeConfig(rawConfig, rawContext)
	if err != nil {
		return Config{}, err
	}
	spec, _ := c.Template["spec"].(map[string]any)
	for _, req := range []struct{ val, msg string }{
		{c.Query, "query: required in the job's context: the Spark SQL to run"},
		{cmp.Or(c.Image, stringAt(spec, "image")), "image: required (the Spark image the driver and executors run), unless the template sets spec.image"},
		{cmp.Or(c.MainApplicationFile, stringAt(spec, "mainApplicationFile")), "main_application_file: required (the wrapper that runs the query file, e.g. local:///opt/tether/run_sql.py), unless the template sets spec.mainApplicationFile"},
	} {
		if req.val == "" {
			return Config{}, dec.Errorf("%s", req.msg)
		}
	}
	return c, nil
}

// decodeConfig is parseConfig without the checks that what a job may still
// bring is set (query, image, main_application_file). Validate uses it on
// the plugin config alone and on each command's default context.
func decodeConfig(rawConfig, rawContext json.RawMessage) (Config, error) {
	cfgFields, err := dec.Object("config", rawConfig, contextKeys)
	if err != nil {
		return Config{}, err
	}
	if _, ok := cfgFields["query"]; ok {
		return Config{}, dec.Errorf("config: query belongs in the job's context, not the plugin config")
	}
	ctxFields, err := dec.Object("context", rawContext, contextKeys)
	if err != nil {
		return Config{}, err
	}
	merged, err := dec.Merge(cfgFields, ctxFields, mergedKeys...)
	if err != nil {
		return Config{}, err
	}
	c := Config{
		Timeout:        DefaultTimeout,
		PollInterval:   DefaultPollInterval,
		UnknownGrace:   DefaultUnknownGrace,
		AuthGrace:      DefaultAuthGrace,
		StartupTimeout: DefaultStartupTimeout,
		TimeToLive:     DefaultTimeToLive,
		QueryMountPath: DefaultQueryMountPath,
		Namespace:      DefaultNamespace,
	}
	if c.Access, err = parseAccess(merged); err != nil {
		return Config{}, err
	}
	// The keys of the cluster access have no decoder here: decoded above.
	if err := decodeFields(merged, c.fields(), ""); err != nil {
		return Config{}, err
	}
	return c, nil
}

// decodeFields decodes each set field that has a decoder, in the order of
// the keys. A decoder's key is prefix and the field's key.
func decodeFields(fields settings.Fields, decoders map[string]fieldDecoder, prefix string) error {
	for _, key := range fields.Keys() {
		decode, ok := decoders[key]
		if !ok {
			continue
		}
		if err := decode(prefix+key, fields[key]); err != nil {
			return err
		}
	}
	return nil
}

// fieldDecoder decodes the value of one key into its field.
type fieldDecoder func(key string, v json.RawMessage) error

// fields maps each key but the cluster access's to the parser, and the
// check, that set its field of c.
func (c *Config) fields() map[string]fieldDecoder {
	return map[string]fieldDecoder{
		"namespace":             set(&c.Namespace, checked(dec.String, dnsLabel)),
		"image":                 set(&c.Image, dec.String),
		"image_pull_policy":     set(&c.ImagePullPolicy, oneOf("Always", "IfNotPresent", "Never")),
		"service_account":       set(&c.ServiceAccount, checked(dec.String, checkServiceAccount)),
		"spark_version":         set(&c.SparkVersion, dec.String),
		"type":                  set(&c.Type, oneOf("Scala", "Java", "Python", "R")),
		"mode":                  set(&c.Mode, checked(dec.String, checkMode)),
		"main_application_file": set(&c.MainApplicationFile, dec.String),
		"main_class":            set(&c.MainClass, dec.String),
		"arguments":             set(&c.Arguments, stringsBlankOK),
		"template":              set(&c.Template, unkeyed(parseTemplate)),
		"spark_conf":            set(&c.SparkConf, dec.StringMap),
		"hadoop_conf":           set(&c.HadoopConf, dec.StringMap),
		"driver":                set(&c.Driver, resources(driverKeys)),
		"executor":              set(&c.Executor, resources(executorKeys)),
		"labels":                set(&c.Labels, checked(dec.StringMap, validLabels)),
		"timeout":               set(&c.Timeout, duration(true)),
		"poll_interval":         set(&c.PollInterval, duration(false)),
		"unknown_grace":         set(&c.UnknownGrace, duration(true)),
		"auth_grace":            set(&c.AuthGrace, duration(true)),
		"startup_timeout":       set(&c.StartupTimeout, duration(true)),
		"time_to_live":          set(&c.TimeToLive, checked(duration(false), checkTimeToLive)),
		"query_mount_path":      set(&c.QueryMountPath, checked(dec.String, checkMountPath)),
		"query":                 set(&c.Query, dec.String),
	}
}

// set returns a decoder that stores what parse makes of a value in *dst.
func set[T any](dst *T, parse func(key string, v json.RawMessage) (T, error)) fieldDecoder {
	return func(key string, v json.RawMessage) (err error) {
		*dst, err = parse(key, v)
		return err
	}
}

// checked is parse followed by check of what it parsed.
func checked[T any](parse func(string, json.RawMessage) (T, error), check func(key string, val T) error) func(string, json.RawMessage) (T, error) {
	return func(key string, v json.RawMessage) (T, error) {
		val, err := parse(key, v)
		if err != nil {
			return val, err
		}
		return val, check(key, val)
	}
}

// unkeyed adapts a parser that names its key in its errors itself.
func unkeyed[T any](parse func(v json.RawMessage) (T, error)) func(string, json.RawMessage) (T, error) {
	return func(_ string, v json.RawMessage) (T, error) { return parse(v) }
}

func oneOf(allowed ...string) func(string, json.RawMessage) (string, error) {
	return func(key string, v json.RawMessage) (string, error) { return dec.OneOf(key, v, allowed...) }
}

func duration(zeroOK bool) func(string, json.RawMessage) (time.Duration, error) {
	return func(key string, v json.RawMessage) (time.Duration, error) { return dec.Duration(key, v, zeroOK) }
}

// stringsBlankOK reads arguments. Blank arguments are passed on. A program
// may want one.
func stringsBlankOK(key string, v json.RawMessage) ([]string, error) {
	return dec.Strings(key, v, true)
}

func resources(known []string) func(string, json.RawMessage) (Resources, error) {
	return func(key string, v json.RawMessage) (Resources, error) { return parseResources(key, v, known) }
}

func checkServiceAccount(_, name string) error {
	return invalid(validation.IsDNS1123Subdomain(name), "service_account: %q is not a valid service account name: %s", name)
}

// invalid is nil when a validation found no errs. Otherwise its message is
// format's, whose last verb gets the errs.
func invalid(errs []string, format string, args ...any) error {
	if len(errs) == 0 {
		return nil
	}
	return dec.Errorf(format, append(args, strings.Join(errs, "; "))...)
}

func checkTimeToLive(_ string, ttl time.Duration) error {
	if ttl < MinTimeToLive {
		return dec.Errorf("time_to_live: must be at least %s (it must outlast the wait before a lost agent's job is resumed, stale_job, plus the resume; an application deleted by its TTL before its outcome was checkpointed ends the job outcome_unknown), got %s", MinTimeToLive, ttl)
	}
	return nil
}

func checkMountPath(_, p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p {
		return dec.Errorf("query_mount_path: must be a clean absolute path like %q, got %q", DefaultQueryMountPath, p)
	}
	return nil
}

// parseClusterConfig reads the plugin config alone, for HealthCheck. Only
// the cluster access is needed. The rest may be left to jobs.
func parseClusterConfig(raw json.RawMessage) (Access, error) {
	fields, err := dec.Object("config", raw, configKeys)
	if err != nil {
		return Access{}, err
	}
	return parseAccess(fields)
}

func parseAccess(fields settings.Fields) (Access, error) {
	var a Access
	if err := decodeFields(fields, a.fields(), ""); err != nil {
		return Access{}, err
	}
	if err := a.check(); err != nil {
		return Access{}, err
	}
	return a, nil
}

// fields maps each key of the cluster access to the parser, and the check,
// that set its field of a.
func (a *Access) fields() map[string]fieldDecoder {
	return map[string]fieldDecoder{
		"kubeconfig":   set(&a.Kubeconfig, dec.String),
		"context":      set(&a.Context, dec.String),
		"in_cluster":   set(&a.InCluster, dec.Bool),
		"eks_cluster":  set(&a.EKSCluster, dec.String),
		"region":       set(&a.Region, dec.String),
		"eks_endpoint": set(&a.EKSEndpoint, checked(dec.String, checkEKSEndpoint)),
		"aws_endpoint": set(&a.AWSEndpoint, checked(dec.String, checkAWSEndpoint)),
		"eks_ca_data":  set(&a.EKSCAData, checked(dec.String, checkCAData)),
	}
}

func checkEKSEndpoint(_, endpoint string) error {
	if !strings.HasPrefix(endpoint, "https://") {
		return dec.Errorf("eks_endpoint: must be the cluster's https:// API server endpoint, got %q", endpoint)
	}
	return nil
}

func checkCAData(_, data string) error {
	if _, err := base64.StdEncoding.DecodeString(data); err != nil {
		return dec.Errorf("eks_ca_data: must be the cluster's certificate authority data, base64-encoded: %v", err)
	}
	return nil
}

// modes are the ways of reaching the cluster the access sets.
func (a *Access) modes() []string {
	var modes []string
	for _, m := range []struct {
		name string
		set  bool
	}{{"kubeconfig", a.Kubeconfig != ""}, {"in_cluster", a.InCluster}, {"eks_cluster", a.EKSCluster != ""}} {
		if m.set {
			modes = append(modes, m.name)
		}
	}
	return modes
}

// check validates the access as a whole. It wants exactly one mode, and the
// settings each mode needs and no others.
func (a *Access) check() error {
	const how = "set exactly one of kubeconfig (a kubeconfig file's path, optionally with context), in_cluster: true, or eks_cluster (with region)"
	modes := a.modes()
	switch {
	case len(modes) == 0:
		return dec.Errorf("cluster access: none configured; %s", how)
	case len(modes) > 1:
		return dec.Errorf("cluster access: %s are all set; %s", strings.Join(modes, " and "), how)
	}
	// The settings of one mode, refused with another.
	for _, s := range []struct{ key, val, mode, modeVal string }{
		{"context", a.Context, "kubeconfig", a.Kubeconfig},
		{"region", a.Region, "eks_cluster", a.EKSCluster},
		{"eks_endpoint", a.EKSEndpoint, "eks_cluster", a.EKSCluster},
		{"eks_ca_data", a.EKSCAData, "eks_cluster", a.EKSCluster},
		{"aws_endpoint", a.AWSEndpoint, "eks_cluster", a.EKSCluster},
	} {
		if s.val != "" && s.modeVal == "" {
			return dec.Errorf("%s: only applies with %s", s.key, s.mode)
		}
	}
	if a.EKSCluster == "" {
		return nil
	}
	return a.checkEKS()
}

// checkEKS checks the settings that go with eks_cluster.
func (a *Access) checkEKS() error {
	if a.Region == "" {
		return dec.Errorf("region: required with eks_cluster (the cluster's AWS region, e.g. \"eu-west-1\")")
	}
	// The endpoint without its CA (or the reverse) is a half-copied
	// describe-cluster output. Looking the other half up would hide that.
	if (a.EKSEndpoint == "") == (a.EKSCAData == "") {
		return nil
	}
	have, lack := "eks_endpoint", "eks_ca_data"
	if a.EKSEndpoint == "" {
		have, lack = lack, have
	}
	return dec.Errorf("eks_endpoint, eks_ca_data: set both (cluster.endpoint and cluster.certificateAuthority.data, as `aws eks describe-cluster` shows them) or neither (the plugin then looks them up with DescribeCluster); %s is set without %s", have, lack)
}

// checkAWSEndpoint accepts an http(s) URL with a host, as the SDK's
// BaseEndpoint needs it.
func checkAWSEndpoint(_, s string) error {
	u, err := url.Parse(s)
	if err != nil || !slices.Contains([]string{"http", "https"}, u.Scheme) || u.Host == "" {
		return dec.Errorf("aws_endpoint: must be an http:// or https:// URL (the endpoint of STS and EKS, e.g. a VPC endpoint or an emulator), got %q", s)
	}
	return nil
}

func parseResources(what string, v json.RawMessage, known []string) (Resources, error) {
	fields, err := dec.Object(what, v, known)
	if err != nil {
		return Resources{}, err
	}
	var r Resources
	if err := decodeFields(fields, r.fields(), what+"."); err != nil {
		return Resources{}, err
	}
	return r, nil
}

// fields maps each key of the driver's or the executors' settings to the
// parser, and the check, that set its field of r.
func (r *Resources) fields() map[string]fieldDecoder {
	return map[string]fieldDecoder{
		"cores":      set(&r.Cores, intIn(1, 1024)),
		"instances":  set(&r.Instances, intIn(1, 100000)),
		"core_limit": set(&r.CoreLimit, dec.String),
		"memory":     set(&r.Memory, dec.String),
		"labels":     set(&r.Labels, checked(dec.StringMap, validLabels)),
	}
}

func intIn(lo, hi int) func(string, json.RawMessage) (int, error) {
	return func(key string, v json.RawMessage) (int, error) { return dec.Int(key, v, lo, hi) }
}

// parseTemplate accepts a mapping, or a string holding a YAML or JSON
// document: a SparkApplication whose spec is the base of the job's.
func parseTemplate(v json.RawMessage) (map[string]any, error) {
	doc, err := templateJSON(v)
	if err != nil {
		return nil, err
	}
	var t map[string]any
	// utiljson keeps whole numbers as int64, as unstructured objects need.
	if err := utiljson.Unmarshal(doc, &t); err != nil || t == nil {
		return nil, dec.Errorf("template: must be a mapping (a SparkApplication object)")
	}
	for _, part := range templateParts {
		if err := visit(t, "", part.path, part.check); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// templateParts are the parts of a template that the job's settings are
// merged into, or that tether cannot run otherwise, each with its check.
// They are checked in this order. Each part's parents come before it.
var templateParts = []struct {
	path  string
	check func(at string, v any) error
}{
	{"apiVersion", mustEqual(APIVersion)},
	{"kind", mustEqual(Kind)},
	{"metadata", mustBe[map[string]any]("a mapping")},
	{"spec", mustBe[map[string]any]("a mapping")},
	{"spec.driver", mustBe[map[string]any]("a mapping")},
	{"spec.executor", mustBe[map[string]any]("a mapping")},
	{"spec.sparkConf", mustBe[map[string]any]("a mapping")},
	{"spec.hadoopConf", mustBe[map[string]any]("a mapping")},
	{"spec.volumes", mustBe[[]any]("a list")},
	{"spec.arguments", mustBe[[]any]("a list")},
	{"spec.driver.volumeMounts", mustBe[[]any]("a list")},
	// The query's volume and mount are merged into the driver's pod
	// template (addQueryVolume).
	{"spec.driver.template", mustBe[map[string]any]("a mapping (a pod template)")},
	{"spec.driver.template.spec", mustBe[map[string]any]("a mapping")},
	{"spec.driver.template.spec.volumes", mustBe[[]any]("a list")},
	{"spec.driver.template.spec.volumes[]", mustBe[map[string]any]("a mapping")},
	{"spec.driver.template.spec.containers", mustBe[[]any]("a list")},
	{"spec.driver.template.spec.containers[]", mustBe[map[string]any]("a mapping")},
	{"spec.driver.template.spec.containers[].volumeMounts", mustBe[[]any]("a list")},
	{"spec.mode", func(at string, v any) error {
		mode, _ := v.(string)
		return checkMode("template."+at, mode)
	}},
	{"spec.restartPolicy", mustBe[map[string]any]("a mapping")},
	{"spec.restartPolicy.type", checkRestartPolicy},
	{"spec.arguments[]", mustBe[string]("a string")},
}

// visit calls check with each value set at path in x, and where it is.
// A "[]" in path stands for each element of a list. A part that is not a
// mapping (or a list, before "[]") holds nothing. Its own check reports it.
func visit(x any, at, path string, check func(at string, v any) error) error {
	if path == "" {
		return check(at, x)
	}
	key, rest, _ := strings.Cut(path, ".")
	key, each := strings.CutSuffix(key, "[]")
	m, _ := x.(map[string]any)
	v, ok := m[key]
	if !ok {
		return nil
	}
	at = strings.TrimPrefix(at+"."+key, ".") // a key at the root has no dot
	if !each {
		return visit(v, at, rest, check)
	}
	list, _ := v.([]any)
	for i, e := range list {
		if err := visit(e, fmt.Sprintf("%s[%d]", at, i), rest, check); err != nil {
			return err
		}
	}
	return nil
}

// mustBe checks that a template's part is of type T, which want names.
func mustBe[T any](want string) func(at string, v any) error {
	return func(at string, v any) error {
		if _, ok := v.(T); !ok {
			return dec.Errorf("template: %s must be %s", at, want)
		}
		return nil
	}
}

// mustEqual checks the template's apiVersion or kind.
func mustEqual(want string) func(at string, v any) error {
	return func(at string, v any) error {
		if v != want {
			return dec.Errorf("template: %s must be %q (or left out), got %v", at, want, v)
		}
		return nil
	}
}

// templateJSON is the template as a JSON document.
func templateJSON(v json.RawMessage) ([]byte, error) {
	switch settings.Kind(v) {
	case "object":
		return v, nil
	case "string":
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, dec.Errorf("template: %v", err)
		}
		b, err := yaml.YAMLToJSON([]byte(s))
		if err != nil {
			return nil, dec.Errorf("template: not valid YAML or JSON: %v", err)
		}
		return b, nil
	}
	return nil, dec.Errorf("template: must be a SparkApplication (a mapping or a YAML string), got %s", settings.Kind(v))
}

// checkRestartPolicy accepts a spec.restartPolicy.type of Never only.
func checkRestartPolicy(at string, typ any) error {
	if typ != RestartPolicyNever {
		return dec.Errorf("template.%s: must be %q (or left out), got %v: tether sets it to Never, because spark-operator's rerun of a failed (OnFailure) or finished (Always) application would run the query's partial writes again; retries belong to the job (its max_retry)", at, RestartPolicyNever, typ)
	}
	return nil
}

// RestartPolicyNever is the only spec.restartPolicy.type tether submits.
const RestartPolicyNever = "Never"

// checkMode accepts only cluster mode. spark-operator v2.5.2's CRD
// (config/crd/bases/sparkoperator.k8s.io_sparkapplications.yaml,
// spec.mode) allows "cluster" and "client" only, and the operator passes it
// to spark-submit as --deploy-mode (internal/controller/sparkapplication/
// submission.go). In client mode the driver runs inside the operator's own
// spark-submit process, so there is no driver pod for tether to follow and
// the application outlives nothing. "in-cluster-client" (a Go constant in
// api/v1beta2/sparkapplication_types.go) is refused by the CRD's enum.
func checkMode(key, mode string) error {
	if mode != DefaultMode {
		return dec.Errorf("%s: must be %q, got %q: the driver must run in its own pod (spark-submit --deploy-mode cluster) for tether to follow it and for it to outlive an agent; spark-operator's CRD allows only cluster and client, and client mode runs the driver inside the operator", key, DefaultMode, mode)
	}
	return nil
}

// stringAt is m[key] when it is a string, else "".
func stringAt(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

func validLabels(what string, labels map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if err := invalid(content.IsLabelKey(k), "%s: key %q is not a valid label key: %s", what, k); err != nil {
			return err
		}
		if err := invalid(content.IsLabelValue(labels[k]), "%s.%s: %q is not a valid label value: %s", what, k, labels[k]); err != nil {
			return err
		}
		if strings.HasPrefix(k, "tether.dev/") || k == labelManagedBy {
			return dec.Errorf("%s: key %q is reserved for tether", what, k)
		}
	}
	return nil
}

func dnsLabel(what, s string) error {
	return invalid(validation.IsDNS1123Label(s), "%s: %q is not a valid name: %s", what, s)
}
