package sparkeks

import (
	"encoding/base64"
	"encoding/json"
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
	// DefaultTimeToLive is spec.timeToLiveSeconds: how long the operator
	// keeps a terminated application (counted from its terminationTime).
	DefaultTimeToLive = 24 * time.Hour
	// MinTimeToLive bounds time_to_live from below: a dead agent's job waits
	// stale_job (default 120 s) to be resumed, plus the resume itself; an
	// application the TTL deleted before its outcome was checkpointed ends
	// the job outcome_unknown.
	MinTimeToLive         = 10 * time.Minute
	DefaultQueryMountPath = "/etc/tether/spark-sql"
	// QueryFileToken in arguments is replaced by the mounted query's path.
	QueryFileToken = "{query_file}"
	// QueryKey is the ConfigMap key holding the query; the file's name in
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
	// query is the job's own: it is refused in the plugin config.
	configKeys  = slices.Sorted(slices.Values(append(slices.Clone(accessKeys), appKeys...)))
	contextKeys = slices.Sorted(slices.Values(append(slices.Clone(configKeys), "query")))

	driverKeys   = []string{"core_limit", "cores", "labels", "memory"}
	executorKeys = []string{"core_limit", "cores", "instances", "labels", "memory"}
	// mergedKeys are merged key by key (config, then context) instead of
	// replaced; so are the labels inside driver and executor.
	mergedKeys = []string{"driver", "driver.labels", "executor", "executor.labels", "hadoop_conf", "labels", "spark_conf"}
)

// Access is how the plugin reaches the cluster's API server. Exactly one of
// Kubeconfig, InCluster and EKSCluster is set. It is comparable: the client
// cache is keyed by it.
type Access struct {
	Kubeconfig string
	Context    string
	InCluster  bool
	EKSCluster string
	Region     string
	// EKSEndpoint and EKSCAData are both set or both empty; empty, they are
	// looked up with EKS DescribeCluster.
	EKSEndpoint string
	EKSCAData   string // base64, as in a kubeconfig's certificate-authority-data
	// AWSEndpoint overrides the endpoint of STS (presigning) and EKS
	// (DescribeCluster); empty leaves it to the SDK (AWS_ENDPOINT_URL, ...).
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
// are unset: the template's value, or the default, applies.
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

// dec decodes the plugin's settings; its errors start "sparkeks: ".
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
	if c.Query == "" {
		return Config{}, dec.Errorf("query: required in the job's context: the Spark SQL to run")
	}
	spec, _ := c.Template["spec"].(map[string]any)
	if c.Image == "" && !hasString(spec, "image") {
		return Config{}, dec.Errorf("image: required (the Spark image the driver and executors run), unless the template sets spec.image")
	}
	if c.MainApplicationFile == "" && !hasString(spec, "mainApplicationFile") {
		return Config{}, dec.Errorf("main_application_file: required (the wrapper that runs the query file, e.g. local:///opt/tether/run_sql.py), unless the template sets spec.mainApplicationFile")
	}
	return c, nil
}

// decodeConfig is parseConfig without the checks that what a job may still
// bring is set (query, image, main_application_file): Validate uses it on
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
	for _, key := range merged.Keys() {
		v := merged[key]
		switch key {
		case "namespace":
			if c.Namespace, err = dec.String(key, v); err == nil {
				err = dnsLabel(key, c.Namespace)
			}
		case "image":
			c.Image, err = dec.String(key, v)
		case "image_pull_policy":
			c.ImagePullPolicy, err = dec.OneOf(key, v, "Always", "IfNotPresent", "Never")
		case "service_account":
			if c.ServiceAccount, err = dec.String(key, v); err == nil {
				if errs := validation.IsDNS1123Subdomain(c.ServiceAccount); len(errs) > 0 {
					err = dec.Errorf("service_account: %q is not a valid service account name: %s", c.ServiceAccount, strings.Join(errs, "; "))
				}
			}
		case "spark_version":
			c.SparkVersion, err = dec.String(key, v)
		case "type":
			c.Type, err = dec.OneOf(key, v, "Scala", "Java", "Python", "R")
		case "mode":
			if c.Mode, err = dec.String(key, v); err == nil {
				err = checkMode(key, c.Mode)
			}
		case "main_application_file":
			c.MainApplicationFile, err = dec.String(key, v)
		case "main_class":
			c.MainClass, err = dec.String(key, v)
		case "arguments":
			// Blank arguments are passed on: a program may want one.
			c.Arguments, err = dec.Strings(key, v, true)
		case "template":
			c.Template, err = parseTemplate(v)
		case "spark_conf":
			c.SparkConf, err = dec.StringMap(key, v)
		case "hadoop_conf":
			c.HadoopConf, err = dec.StringMap(key, v)
		case "driver":
			c.Driver, err = parseResources(key, v, driverKeys)
		case "executor":
			c.Executor, err = parseResources(key, v, executorKeys)
		case "labels":
			if c.Labels, err = dec.StringMap(key, v); err == nil {
				err = validLabels(key, c.Labels)
			}
		case "timeout":
			c.Timeout, err = dec.Duration(key, v, true)
		case "poll_interval":
			c.PollInterval, err = dec.Duration(key, v, false)
		case "unknown_grace":
			c.UnknownGrace, err = dec.Duration(key, v, true)
		case "auth_grace":
			c.AuthGrace, err = dec.Duration(key, v, true)
		case "startup_timeout":
			c.StartupTimeout, err = dec.Duration(key, v, true)
		case "time_to_live":
			if c.TimeToLive, err = dec.Duration(key, v, false); err == nil && c.TimeToLive < MinTimeToLive {
				err = dec.Errorf("time_to_live: must be at least %s (it must outlast the wait before a lost agent's job is resumed, stale_job, plus the resume; an application deleted by its TTL before its outcome was checkpointed ends the job outcome_unknown), got %s", MinTimeToLive, c.TimeToLive)
			}
		case "query_mount_path":
			if c.QueryMountPath, err = dec.String(key, v); err == nil && (!path.IsAbs(c.QueryMountPath) || path.Clean(c.QueryMountPath) != c.QueryMountPath) {
				err = dec.Errorf("query_mount_path: must be a clean absolute path like %q, got %q", DefaultQueryMountPath, c.QueryMountPath)
			}
		case "query":
			c.Query, err = dec.String(key, v)
		}
		if err != nil {
			return Config{}, err
		}
	}
	return c, nil
}

// parseClusterConfig reads the plugin config alone, for HealthCheck: only
// the cluster access is needed, the rest may be left to jobs.
func parseClusterConfig(raw json.RawMessage) (Access, error) {
	fields, err := dec.Object("config", raw, configKeys)
	if err != nil {
		return Access{}, err
	}
	return parseAccess(fields)
}

func parseAccess(fields settings.Fields) (Access, error) {
	var a Access
	var err error
	for _, key := range accessKeys {
		v, ok := fields.Get(key)
		if !ok {
			continue
		}
		switch key {
		case "kubeconfig":
			a.Kubeconfig, err = dec.String(key, v)
		case "context":
			a.Context, err = dec.String(key, v)
		case "in_cluster":
			a.InCluster, err = dec.Bool(key, v)
		case "eks_cluster":
			a.EKSCluster, err = dec.String(key, v)
		case "region":
			a.Region, err = dec.String(key, v)
		case "eks_endpoint":
			if a.EKSEndpoint, err = dec.String(key, v); err == nil && !strings.HasPrefix(a.EKSEndpoint, "https://") {
				err = dec.Errorf("eks_endpoint: must be the cluster's https:// API server endpoint, got %q", a.EKSEndpoint)
			}
		case "aws_endpoint":
			if a.AWSEndpoint, err = dec.String(key, v); err == nil {
				err = checkAWSEndpoint(a.AWSEndpoint)
			}
		case "eks_ca_data":
			if a.EKSCAData, err = dec.String(key, v); err == nil {
				if _, derr := base64.StdEncoding.DecodeString(a.EKSCAData); derr != nil {
					err = dec.Errorf("eks_ca_data: must be the cluster's certificate authority data, base64-encoded: %v", derr)
				}
			}
		}
		if err != nil {
			return Access{}, err
		}
	}
	var modes []string
	if a.Kubeconfig != "" {
		modes = append(modes, "kubeconfig")
	}
	if a.InCluster {
		modes = append(modes, "in_cluster")
	}
	if a.EKSCluster != "" {
		modes = append(modes, "eks_cluster")
	}
	const how = "set exactly one of kubeconfig (a kubeconfig file's path, optionally with context), in_cluster: true, or eks_cluster (with region)"
	switch {
	case len(modes) == 0:
		return Access{}, dec.Errorf("cluster access: none configured; %s", how)
	case len(modes) > 1:
		return Access{}, dec.Errorf("cluster access: %s are all set; %s", strings.Join(modes, " and "), how)
	}
	if a.Context != "" && a.Kubeconfig == "" {
		return Access{}, dec.Errorf("context: only applies with kubeconfig")
	}
	if a.EKSCluster == "" {
		for _, kv := range [][2]string{{"region", a.Region}, {"eks_endpoint", a.EKSEndpoint}, {"eks_ca_data", a.EKSCAData}, {"aws_endpoint", a.AWSEndpoint}} {
			if kv[1] != "" {
				return Access{}, dec.Errorf("%s: only applies with eks_cluster", kv[0])
			}
		}
		return a, nil
	}
	if a.Region == "" {
		return Access{}, dec.Errorf("region: required with eks_cluster (the cluster's AWS region, e.g. \"eu-west-1\")")
	}
	// The endpoint without its CA (or the reverse) is a half-copied
	// describe-cluster output; looking the other half up would hide that.
	if (a.EKSEndpoint == "") != (a.EKSCAData == "") {
		set, unset := "eks_endpoint", "eks_ca_data"
		if a.EKSEndpoint == "" {
			set, unset = unset, set
		}
		return Access{}, dec.Errorf("eks_endpoint, eks_ca_data: set both (cluster.endpoint and cluster.certificateAuthority.data, as `aws eks describe-cluster` shows them) or neither (the plugin then looks them up with DescribeCluster); %s is set without %s", set, unset)
	}
	return a, nil
}

// checkAWSEndpoint accepts an http(s) URL with a host, as the SDK's
// BaseEndpoint needs it.
func checkAWSEndpoint(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
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
	for _, key := range fields.Keys() {
		f := fields[key]
		name := what + "." + key
		switch key {
		case "cores":
			r.Cores, err = dec.Int(name, f, 1, 1024)
		case "instances":
			r.Instances, err = dec.Int(name, f, 1, 100000)
		case "core_limit":
			r.CoreLimit, err = dec.String(name, f)
		case "memory":
			r.Memory, err = dec.String(name, f)
		case "labels":
			if r.Labels, err = dec.StringMap(name, f); err == nil {
				err = validLabels(name, r.Labels)
			}
		}
		if err != nil {
			return Resources{}, err
		}
	}
	return r, nil
}

// parseTemplate accepts a mapping, or a string holding a YAML or JSON
// document: a SparkApplication whose spec is the base of the job's.
func parseTemplate(v json.RawMessage) (map[string]any, error) {
	var doc []byte
	switch settings.Kind(v) {
	case "object":
		doc = v
	case "string":
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, dec.Errorf("template: %v", err)
		}
		b, err := yaml.YAMLToJSON([]byte(s))
		if err != nil {
			return nil, dec.Errorf("template: not valid YAML or JSON: %v", err)
		}
		doc = b
	default:
		return nil, dec.Errorf("template: must be a SparkApplication (a mapping or a YAML string), got %s", settings.Kind(v))
	}
	var t map[string]any
	// utiljson keeps whole numbers as int64, as unstructured objects need.
	if err := utiljson.Unmarshal(doc, &t); err != nil || t == nil {
		return nil, dec.Errorf("template: must be a mapping (a SparkApplication object)")
	}
	for _, kv := range [][2]string{{"apiVersion", APIVersion}, {"kind", Kind}} {
		if got, ok := t[kv[0]]; ok && got != kv[1] {
			return nil, dec.Errorf("template: %s must be %q (or left out), got %v", kv[0], kv[1], got)
		}
	}
	for _, key := range []string{"metadata", "spec"} {
		if x, ok := t[key]; ok {
			if _, isMap := x.(map[string]any); !isMap {
				return nil, dec.Errorf("template: %s must be a mapping", key)
			}
		}
	}
	if spec, ok := t["spec"].(map[string]any); ok {
		for _, key := range []string{"driver", "executor", "sparkConf", "hadoopConf"} {
			if x, ok := spec[key]; ok {
				if _, isMap := x.(map[string]any); !isMap {
					return nil, dec.Errorf("template: spec.%s must be a mapping", key)
				}
			}
		}
		for _, key := range []string{"volumes", "arguments"} {
			if x, ok := spec[key]; ok {
				if _, isList := x.([]any); !isList {
					return nil, dec.Errorf("template: spec.%s must be a list", key)
				}
			}
		}
		if d, ok := spec["driver"].(map[string]any); ok {
			if x, ok := d["volumeMounts"]; ok {
				if _, isList := x.([]any); !isList {
					return nil, dec.Errorf("template: spec.driver.volumeMounts must be a list")
				}
			}
			if err := checkPodTemplate(d); err != nil {
				return nil, err
			}
		}
		if m, ok := spec["mode"]; ok {
			ms, _ := m.(string)
			if err := checkMode("template.spec.mode", ms); err != nil {
				return nil, err
			}
		}
		if rp, ok := spec["restartPolicy"]; ok {
			rpm, isMap := rp.(map[string]any)
			if !isMap {
				return nil, dec.Errorf("template: spec.restartPolicy must be a mapping")
			}
			if typ, ok := rpm["type"]; ok && typ != RestartPolicyNever {
				return nil, dec.Errorf("template.spec.restartPolicy.type: must be %q (or left out), got %v: tether sets it to Never, because spark-operator's rerun of a failed (OnFailure) or finished (Always) application would run the query's partial writes again; retries belong to the job (its max_retry)", RestartPolicyNever, typ)
			}
		}
		if args, ok := spec["arguments"].([]any); ok {
			for i, a := range args {
				if _, isString := a.(string); !isString {
					return nil, dec.Errorf("template: spec.arguments[%d] must be a string", i)
				}
			}
		}
	}
	return t, nil
}

// RestartPolicyNever is the only spec.restartPolicy.type tether submits.
const RestartPolicyNever = "Never"

// checkMode accepts only cluster mode. spark-operator v2.5.2's CRD
// (config/crd/bases/sparkoperator.k8s.io_sparkapplications.yaml,
// spec.mode) allows "cluster" and "client" only, and the operator passes it
// to spark-submit as --deploy-mode (internal/controller/sparkapplication/
// submission.go): in client mode the driver runs inside the operator's own
// spark-submit process, so there is no driver pod for tether to follow and
// the application outlives nothing; "in-cluster-client" (a Go constant in
// api/v1beta2/sparkapplication_types.go) is refused by the CRD's enum.
func checkMode(key, mode string) error {
	if mode != DefaultMode {
		return dec.Errorf("%s: must be %q, got %q: the driver must run in its own pod (spark-submit --deploy-mode cluster) for tether to follow it and for it to outlive an agent; spark-operator's CRD allows only cluster and client, and client mode runs the driver inside the operator", key, DefaultMode, mode)
	}
	return nil
}

func hasString(m map[string]any, key string) bool {
	s, ok := m[key].(string)
	return ok && s != ""
}

func validLabels(what string, labels map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if errs := content.IsLabelKey(k); len(errs) > 0 {
			return dec.Errorf("%s: key %q is not a valid label key: %s", what, k, strings.Join(errs, "; "))
		}
		if errs := content.IsLabelValue(labels[k]); len(errs) > 0 {
			return dec.Errorf("%s.%s: %q is not a valid label value: %s", what, k, labels[k], strings.Join(errs, "; "))
		}
		if strings.HasPrefix(k, "tether.dev/") || k == labelManagedBy {
			return dec.Errorf("%s: key %q is reserved for tether", what, k)
		}
	}
	return nil
}

func dnsLabel(what, s string) error {
	if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
		return dec.Errorf("%s: %q is not a valid name: %s", what, s, strings.Join(errs, "; "))
	}
	return nil
}

// checkPodTemplate checks the shape of spec.driver.template, which the
// query's volume and mount are merged into (addQueryVolume).
func checkPodTemplate(driver map[string]any) error {
	x, ok := driver["template"]
	if !ok {
		return nil
	}
	pt, isMap := x.(map[string]any)
	if !isMap {
		return dec.Errorf("template: spec.driver.template must be a mapping (a pod template)")
	}
	x, ok = pt["spec"]
	if !ok {
		return nil
	}
	ps, isMap := x.(map[string]any)
	if !isMap {
		return dec.Errorf("template: spec.driver.template.spec must be a mapping")
	}
	for _, key := range []string{"volumes", "containers"} {
		x, ok := ps[key]
		if !ok {
			continue
		}
		list, isList := x.([]any)
		if !isList {
			return dec.Errorf("template: spec.driver.template.spec.%s must be a list", key)
		}
		for i, e := range list {
			if _, isMap := e.(map[string]any); !isMap {
				return dec.Errorf("template: spec.driver.template.spec.%s[%d] must be a mapping", key, i)
			}
		}
	}
	if cs, ok := ps["containers"].([]any); ok {
		for i, c := range cs {
			if x, ok := c.(map[string]any)["volumeMounts"]; ok {
				if _, isList := x.([]any); !isList {
					return dec.Errorf("template: spec.driver.template.spec.containers[%d].volumeMounts must be a list", i)
				}
			}
		}
	}
	return nil
}
