package sparkeks

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/validate/content"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/tetherjobs/tether/pkg/plugin"
)

// Defaults for settings neither the plugin config, the template nor the job sets.
const (
	DefaultNamespace      = "default"
	DefaultSparkVersion   = "3.5.3"
	DefaultType           = "Python"
	DefaultMode           = "cluster"
	DefaultTimeout        = 5 * time.Hour
	DefaultPollInterval   = 10 * time.Second
	DefaultUnknownGrace   = 5 * time.Minute
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
	accessKeys = []string{"context", "eks_ca_data", "eks_cluster", "eks_endpoint", "in_cluster", "kubeconfig", "region"}
	appKeys    = []string{
		"arguments", "driver", "executor", "hadoop_conf", "image", "image_pull_policy", "labels",
		"main_application_file", "main_class", "mode", "namespace", "poll_interval", "query_mount_path",
		"service_account", "spark_conf", "spark_version", "template", "timeout", "type", "unknown_grace",
	}
	// query is the job's own: it is refused in the plugin config.
	configKeys  = sortedCopy(append(slices.Clone(accessKeys), appKeys...))
	contextKeys = sortedCopy(append(slices.Clone(configKeys), "query"))

	driverKeys   = []string{"core_limit", "cores", "labels", "memory"}
	executorKeys = []string{"core_limit", "cores", "instances", "labels", "memory"}
	// mergedKeys are merged key by key (config, then context) instead of
	// replaced.
	mergedKeys = []string{"driver", "executor", "hadoop_conf", "labels", "spark_conf"}
)

// Access is how the plugin reaches the cluster's API server. Exactly one of
// Kubeconfig, InCluster and EKSCluster is set. It is comparable: the client
// cache is keyed by it.
type Access struct {
	Kubeconfig  string
	Context     string
	InCluster   bool
	EKSCluster  string
	Region      string
	EKSEndpoint string
	EKSCAData   string // base64, as in a kubeconfig's certificate-authority-data
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
	QueryMountPath      string
	Query               string
}

// QueryFile is where the driver finds the query.
func (c Config) QueryFile() string { return path.Join(c.QueryMountPath, QueryKey) }

func validationError(format string, args ...any) error {
	return plugin.Errorf(plugin.Permanent, "sparkeks: "+format, args...)
}

// parseConfig merges the plugin config with the job's context and validates
// the result. Context keys replace config keys, except driver, executor,
// labels, spark_conf and hadoop_conf, which are merged key by key (the
// context wins). A null value unsets a key.
func parseConfig(rawConfig, rawContext json.RawMessage) (Config, error) {
	cfgFields, err := objectFields("config", rawConfig, contextKeys)
	if err != nil {
		return Config{}, err
	}
	if _, ok := cfgFields["query"]; ok {
		return Config{}, validationError("config: query belongs in the job's context, not the plugin config")
	}
	ctxFields, err := objectFields("context", rawContext, contextKeys)
	if err != nil {
		return Config{}, err
	}
	merged, err := mergeFields(cfgFields, ctxFields)
	if err != nil {
		return Config{}, err
	}
	c := Config{
		Timeout:        DefaultTimeout,
		PollInterval:   DefaultPollInterval,
		UnknownGrace:   DefaultUnknownGrace,
		QueryMountPath: DefaultQueryMountPath,
		Namespace:      DefaultNamespace,
	}
	if c.Access, err = parseAccess(merged); err != nil {
		return Config{}, err
	}
	for _, key := range sortedKeys(merged) {
		v := merged[key]
		switch key {
		case "namespace":
			if c.Namespace, err = nonEmptyString(key, v); err == nil {
				err = dnsLabel(key, c.Namespace)
			}
		case "image":
			c.Image, err = nonEmptyString(key, v)
		case "image_pull_policy":
			c.ImagePullPolicy, err = oneOf(key, v, "Always", "IfNotPresent", "Never")
		case "service_account":
			if c.ServiceAccount, err = nonEmptyString(key, v); err == nil {
				if errs := validation.IsDNS1123Subdomain(c.ServiceAccount); len(errs) > 0 {
					err = validationError("service_account: %q is not a valid service account name: %s", c.ServiceAccount, strings.Join(errs, "; "))
				}
			}
		case "spark_version":
			c.SparkVersion, err = nonEmptyString(key, v)
		case "type":
			c.Type, err = oneOf(key, v, "Scala", "Java", "Python", "R")
		case "mode":
			c.Mode, err = oneOf(key, v, "cluster", "client", "in-cluster-client")
		case "main_application_file":
			c.MainApplicationFile, err = nonEmptyString(key, v)
		case "main_class":
			c.MainClass, err = nonEmptyString(key, v)
		case "arguments":
			c.Arguments, err = stringList(key, v)
			if err == nil && c.Arguments == nil {
				c.Arguments = []string{}
			}
		case "template":
			c.Template, err = parseTemplate(v)
		case "spark_conf":
			c.SparkConf, err = stringMap(key, v)
		case "hadoop_conf":
			c.HadoopConf, err = stringMap(key, v)
		case "driver":
			c.Driver, err = parseResources(key, v, driverKeys)
		case "executor":
			c.Executor, err = parseResources(key, v, executorKeys)
		case "labels":
			if c.Labels, err = stringMap(key, v); err == nil {
				err = validLabels(key, c.Labels)
			}
		case "timeout":
			c.Timeout, err = duration(key, v, true)
		case "poll_interval":
			c.PollInterval, err = duration(key, v, false)
		case "unknown_grace":
			c.UnknownGrace, err = duration(key, v, true)
		case "query_mount_path":
			if c.QueryMountPath, err = nonEmptyString(key, v); err == nil && (!path.IsAbs(c.QueryMountPath) || path.Clean(c.QueryMountPath) != c.QueryMountPath) {
				err = validationError("query_mount_path: must be a clean absolute path like %q, got %q", DefaultQueryMountPath, c.QueryMountPath)
			}
		case "query":
			c.Query, err = nonEmptyString(key, v)
		}
		if err != nil {
			return Config{}, err
		}
	}
	if c.Query == "" {
		return Config{}, validationError("query: required in the job's context: the Spark SQL to run")
	}
	spec, _ := c.Template["spec"].(map[string]any)
	if c.Image == "" && !hasString(spec, "image") {
		return Config{}, validationError("image: required (the Spark image the driver and executors run), unless the template sets spec.image")
	}
	if c.MainApplicationFile == "" && !hasString(spec, "mainApplicationFile") {
		return Config{}, validationError("main_application_file: required (the wrapper that runs the query file, e.g. local:///opt/tether/run_sql.py), unless the template sets spec.mainApplicationFile")
	}
	return c, nil
}

// parseClusterConfig reads the plugin config alone, for HealthCheck: only
// the cluster access is needed, the rest may be left to jobs.
func parseClusterConfig(raw json.RawMessage) (Access, error) {
	fields, err := objectFields("config", raw, configKeys)
	if err != nil {
		return Access{}, err
	}
	for k, v := range fields {
		if isNull(v) {
			delete(fields, k)
		}
	}
	return parseAccess(fields)
}

// mergeFields lays the context's fields over the config's.
func mergeFields(cfg, ctx map[string]json.RawMessage) (map[string]json.RawMessage, error) {
	merged := map[string]json.RawMessage{}
	for _, src := range []map[string]json.RawMessage{cfg, ctx} {
		for k, v := range src {
			if !slices.Contains(mergedKeys, k) || isNull(v) {
				merged[k] = v
				continue
			}
			m, err := mergeObjects(k, merged[k], v)
			if err != nil {
				return nil, err
			}
			merged[k] = m
		}
	}
	for k, v := range merged {
		if isNull(v) {
			delete(merged, k)
		}
	}
	return merged, nil
}

// mergeObjects lays over's keys over base's; labels inside driver and
// executor are merged the same way.
func mergeObjects(what string, base, over json.RawMessage) (json.RawMessage, error) {
	var b, o map[string]json.RawMessage
	if len(base) > 0 && !isNull(base) {
		if err := json.Unmarshal(base, &b); err != nil {
			return nil, validationError("%s: %v", what, err)
		}
	}
	if jsonKind(over) != "object" || json.Unmarshal(over, &o) != nil {
		return nil, validationError("%s: must be a mapping, got %s", what, jsonKind(over))
	}
	if b == nil {
		b = map[string]json.RawMessage{}
	}
	for k, v := range o {
		if k == "labels" && (what == "driver" || what == "executor") && !isNull(v) && b[k] != nil {
			m, err := mergeObjects(what+".labels", b[k], v)
			if err != nil {
				return nil, err
			}
			b[k] = m
			continue
		}
		b[k] = v
	}
	out, err := json.Marshal(b)
	if err != nil {
		return nil, validationError("%s: %v", what, err)
	}
	return out, nil
}

func parseAccess(fields map[string]json.RawMessage) (Access, error) {
	var a Access
	var err error
	for _, key := range accessKeys {
		v, ok := fields[key]
		if !ok || isNull(v) {
			continue
		}
		switch key {
		case "kubeconfig":
			a.Kubeconfig, err = nonEmptyString(key, v)
		case "context":
			a.Context, err = nonEmptyString(key, v)
		case "in_cluster":
			if jsonKind(v) != "boolean" {
				err = validationError("in_cluster: must be true or false, got %s", jsonKind(v))
			} else {
				err = json.Unmarshal(v, &a.InCluster)
			}
		case "eks_cluster":
			a.EKSCluster, err = nonEmptyString(key, v)
		case "region":
			a.Region, err = nonEmptyString(key, v)
		case "eks_endpoint":
			if a.EKSEndpoint, err = nonEmptyString(key, v); err == nil && !strings.HasPrefix(a.EKSEndpoint, "https://") {
				err = validationError("eks_endpoint: must be the cluster's https:// API server endpoint, got %q", a.EKSEndpoint)
			}
		case "eks_ca_data":
			if a.EKSCAData, err = nonEmptyString(key, v); err == nil {
				if _, derr := base64.StdEncoding.DecodeString(a.EKSCAData); derr != nil {
					err = validationError("eks_ca_data: must be the cluster's certificate authority data, base64-encoded: %v", derr)
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
	const how = "set exactly one of kubeconfig (a kubeconfig file's path, optionally with context), in_cluster: true, or eks_cluster (with region, eks_endpoint and eks_ca_data)"
	switch {
	case len(modes) == 0:
		return Access{}, validationError("cluster access: none configured; %s", how)
	case len(modes) > 1:
		return Access{}, validationError("cluster access: %s are all set; %s", strings.Join(modes, " and "), how)
	}
	if a.Context != "" && a.Kubeconfig == "" {
		return Access{}, validationError("context: only applies with kubeconfig")
	}
	if a.EKSCluster == "" {
		for key, v := range map[string]string{"region": a.Region, "eks_endpoint": a.EKSEndpoint, "eks_ca_data": a.EKSCAData} {
			if v != "" {
				return Access{}, validationError("%s: only applies with eks_cluster", key)
			}
		}
	} else {
		for _, kv := range [][2]string{{"region", a.Region}, {"eks_endpoint", a.EKSEndpoint}, {"eks_ca_data", a.EKSCAData}} {
			if kv[1] == "" {
				return Access{}, validationError("%s: required with eks_cluster (the cluster's region, API server endpoint and base64 certificate authority data, as `aws eks describe-cluster` shows them)", kv[0])
			}
		}
	}
	return a, nil
}

func parseResources(what string, v json.RawMessage, known []string) (Resources, error) {
	fields, err := objectFields(what, v, known)
	if err != nil {
		return Resources{}, err
	}
	var r Resources
	for _, key := range sortedKeys(fields) {
		f := fields[key]
		if isNull(f) {
			continue
		}
		name := what + "." + key
		switch key {
		case "cores":
			r.Cores, err = intIn(name, f, 1, 1024)
		case "instances":
			r.Instances, err = intIn(name, f, 1, 100000)
		case "core_limit":
			r.CoreLimit, err = nonEmptyString(name, f)
		case "memory":
			r.Memory, err = nonEmptyString(name, f)
		case "labels":
			if r.Labels, err = stringMap(name, f); err == nil {
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
	switch jsonKind(v) {
	case "object":
		doc = v
	case "string":
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, validationError("template: %v", err)
		}
		b, err := yaml.YAMLToJSON([]byte(s))
		if err != nil {
			return nil, validationError("template: not valid YAML or JSON: %v", err)
		}
		doc = b
	default:
		return nil, validationError("template: must be a SparkApplication (a mapping or a YAML string), got %s", jsonKind(v))
	}
	var t map[string]any
	// utiljson keeps whole numbers as int64, as unstructured objects need.
	if err := utiljson.Unmarshal(doc, &t); err != nil || t == nil {
		return nil, validationError("template: must be a mapping (a SparkApplication object)")
	}
	for _, kv := range [][2]string{{"apiVersion", APIVersion}, {"kind", Kind}} {
		if got, ok := t[kv[0]]; ok && got != kv[1] {
			return nil, validationError("template: %s must be %q (or left out), got %v", kv[0], kv[1], got)
		}
	}
	for _, key := range []string{"metadata", "spec"} {
		if x, ok := t[key]; ok {
			if _, isMap := x.(map[string]any); !isMap {
				return nil, validationError("template: %s must be a mapping", key)
			}
		}
	}
	if spec, ok := t["spec"].(map[string]any); ok {
		for _, key := range []string{"driver", "executor", "sparkConf", "hadoopConf"} {
			if x, ok := spec[key]; ok {
				if _, isMap := x.(map[string]any); !isMap {
					return nil, validationError("template: spec.%s must be a mapping", key)
				}
			}
		}
		for _, key := range []string{"volumes", "arguments"} {
			if x, ok := spec[key]; ok {
				if _, isList := x.([]any); !isList {
					return nil, validationError("template: spec.%s must be a list", key)
				}
			}
		}
		if d, ok := spec["driver"].(map[string]any); ok {
			if x, ok := d["volumeMounts"]; ok {
				if _, isList := x.([]any); !isList {
					return nil, validationError("template: spec.driver.volumeMounts must be a list")
				}
			}
		}
		if args, ok := spec["arguments"].([]any); ok {
			for i, a := range args {
				if _, isString := a.(string); !isString {
					return nil, validationError("template: spec.arguments[%d] must be a string", i)
				}
			}
		}
	}
	return t, nil
}

func hasString(m map[string]any, key string) bool {
	s, ok := m[key].(string)
	return ok && s != ""
}

func validLabels(what string, labels map[string]string) error {
	for _, k := range sortedKeys(labels) {
		if errs := content.IsLabelKey(k); len(errs) > 0 {
			return validationError("%s: key %q is not a valid label key: %s", what, k, strings.Join(errs, "; "))
		}
		if errs := content.IsLabelValue(labels[k]); len(errs) > 0 {
			return validationError("%s.%s: %q is not a valid label value: %s", what, k, labels[k], strings.Join(errs, "; "))
		}
		if strings.HasPrefix(k, "tether.dev/") || k == labelManagedBy {
			return validationError("%s: key %q is reserved for tether", what, k)
		}
	}
	return nil
}

func dnsLabel(what, s string) error {
	if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
		return validationError("%s: %q is not a valid name: %s", what, s, strings.Join(errs, "; "))
	}
	return nil
}

// objectFields splits a JSON object into its top-level fields and rejects
// keys not in known. Empty input and null are an empty object.
func objectFields(what string, raw json.RawMessage, known []string) (map[string]json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 || isNull(raw) {
		return map[string]json.RawMessage{}, nil
	}
	if kind := jsonKind(raw); kind != "object" {
		return nil, validationError("%s: must be a mapping, got %s", what, kind)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, validationError("%s: %v", what, err)
	}
	for _, k := range sortedKeys(fields) {
		if !slices.Contains(known, k) {
			return nil, validationError("%s: unknown key %q; known keys are %s", what, k, strings.Join(known, ", "))
		}
	}
	return fields, nil
}

func nonEmptyString(what string, v json.RawMessage) (string, error) {
	var s string
	if jsonKind(v) != "string" || json.Unmarshal(v, &s) != nil {
		return "", validationError("%s: must be a string, got %s", what, jsonKind(v))
	}
	if strings.TrimSpace(s) == "" {
		return "", validationError("%s: must not be empty", what)
	}
	return s, nil
}

func oneOf(what string, v json.RawMessage, allowed ...string) (string, error) {
	s, err := nonEmptyString(what, v)
	if err != nil {
		return "", err
	}
	if !slices.Contains(allowed, s) {
		return "", validationError("%s: must be one of %s, got %q", what, strings.Join(allowed, ", "), s)
	}
	return s, nil
}

func stringList(what string, v json.RawMessage) ([]string, error) {
	var items []json.RawMessage
	if jsonKind(v) != "array" || json.Unmarshal(v, &items) != nil {
		return nil, validationError("%s: must be a list of strings, got %s", what, jsonKind(v))
	}
	out := make([]string, len(items))
	for i, item := range items {
		if jsonKind(item) != "string" || json.Unmarshal(item, &out[i]) != nil {
			return nil, validationError("%s[%d]: must be a string, got %s", what, i, jsonKind(item))
		}
	}
	return out, nil
}

func stringMap(what string, v json.RawMessage) (map[string]string, error) {
	var m map[string]json.RawMessage
	if jsonKind(v) != "object" || json.Unmarshal(v, &m) != nil {
		return nil, validationError("%s: must be a mapping of strings, got %s", what, jsonKind(v))
	}
	out := make(map[string]string, len(m))
	for _, k := range sortedKeys(m) {
		val := m[k]
		if isNull(val) {
			continue // unset by a later layer
		}
		var s string
		if jsonKind(val) != "string" || json.Unmarshal(val, &s) != nil {
			return nil, validationError("%s.%s: must be a string, got %s", what, k, jsonKind(val))
		}
		out[k] = s
	}
	return out, nil
}

func intIn(what string, v json.RawMessage, lo, hi int) (int, error) {
	var n int
	if jsonKind(v) != "number" || json.Unmarshal(v, &n) != nil {
		return 0, validationError("%s: must be a whole number, got %s", what, v)
	}
	if n < lo || n > hi {
		return 0, validationError("%s: must be between %d and %d, got %d", what, lo, hi, n)
	}
	return n, nil
}

// duration reads a Go duration string ("10s", "5h"); "0" means zero, which
// only zeroOK settings accept.
func duration(what string, v json.RawMessage, zeroOK bool) (time.Duration, error) {
	s, err := nonEmptyString(what, v)
	if err != nil {
		return 0, validationError("%s: must be a duration string like \"30s\", got %s", what, v)
	}
	d, err := time.ParseDuration(s)
	if s == "0" {
		d, err = 0, nil
	}
	if err != nil || d < 0 {
		return 0, validationError("%s: must be a non-negative duration like \"30s\", got %q", what, s)
	}
	if d == 0 && !zeroOK {
		return 0, validationError("%s: must be positive, got %q", what, s)
	}
	return d, nil
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

func jsonKind(v json.RawMessage) string {
	t := bytes.TrimSpace(v)
	if len(t) == 0 {
		return "nothing"
	}
	switch t[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}
