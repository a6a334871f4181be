// Command sparksubmit stands in for $SPARK_HOME/bin/spark-submit under the
// real kubeflow spark-operator in tether's tests (internal/kubetest builds it
// into the stack's directory and points the operator's SPARK_HOME at it).
// It does to the Kubernetes API what cluster-mode spark-submit does there.
// It creates the driver pod, named, labelled, annotated and owned as the
// operator expects to find it, and exits. It runs no JVM, creates no
// executors (the kubelet stand-in only runs the driver), and skips the
// driver's spark.properties ConfigMap and headless Service that real Spark
// also creates.
//
// It follows, in github.com/kubeflow/spark-operator/v2@v2.5.2:
//   - internal/controller/sparkapplication/submission.go: runSparkSubmit
//     (how it is run, and that stderr containing "code=409" becomes "driver
//     pod already exist") and buildSparkSubmitArgs (the arguments: --master
//     k8s://https://host:port, --deploy-mode, --name, --class, --conf k=v,
//     the dependency options, the main application file and its arguments;
//     driverConfOption for the driver labels/annotations;
//     driverPodTemplateOption for the pod template file: the
//     spec.driver.template, if any, plus the ownerReference to the
//     SparkApplication; the driver pod is built from it as Spark builds it,
//     keeping the template's metadata, volumes and containers, the driver
//     container being the one podTemplateContainerName names);
//   - internal/controller/sparkapplication/controller.go: getDriverPod (the
//     pod is looked up by status.driverInfo.podName in the app's namespace)
//     and updateDriverState (spark-app-selector becomes sparkApplicationId,
//     the container named spark-kubernetes-driver gives the exit code);
//   - pkg/util/sparkpod.go and pkg/util/sparkapplication.go (the labels the
//     operator reads: spark-role, spark-app-selector,
//     sparkoperator.k8s.io/app-name, .../launched-by-spark-operator,
//     .../submission-id);
//   - cmd/operator/controller/start.go: newCacheOptions (the operator only
//     sees pods labelled sparkoperator.k8s.io/launched-by-spark-operator=true).
//
// Beyond Spark. Every --conf whose key starts with "tether.sim." also
// becomes a driver pod annotation, so a test scripts the kubelet stand-in
// (internal/kubetest/kubelet.go) through the app's sparkConf.
//
// Credentials. The API server is the --master URL. The client certificate,
// key and CA come from the files named by TETHER_SPARK_SUBMIT_CERT,
// TETHER_SPARK_SUBMIT_KEY and TETHER_SPARK_SUBMIT_CA (set on the operator's
// environment, which spark-submit inherits).
package main

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

const driverContainer = "spark-kubernetes-driver"

type submission struct {
	master, deployMode, name, class string
	conf                            map[string]string
	resource                        string
	args                            []string
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "Exception in thread \"main\" "+err.Error())
		os.Exit(1)
	}
}

func run(argv []string) error {
	s, err := parse(argv)
	if err != nil {
		return err
	}
	if s.deployMode != "cluster" {
		return fmt.Errorf("org.apache.spark.SparkException: the stand-in spark-submit only does --deploy-mode cluster, got %q", s.deployMode)
	}
	server, ok := strings.CutPrefix(s.master, "k8s://")
	if !ok {
		return fmt.Errorf("org.apache.spark.SparkException: master %q is not k8s://", s.master)
	}
	pod, err := driverPod(s)
	if err != nil {
		return err
	}
	client, err := httpClient()
	if err != nil {
		return err
	}
	ns := pod["metadata"].(map[string]any)["namespace"].(string)
	body, _ := json.Marshal(pod)
	url := strings.TrimSuffix(server, "/") + "/api/v1/namespaces/" + ns + "/pods"
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("io.fabric8.kubernetes.client.KubernetesClientException: Operation: [create] for kind: [Pod] with name: [%v] in namespace: [%s] failed: %v",
			pod["metadata"].(map[string]any)["name"], ns, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		var st struct {
			Message, Reason string
		}
		_ = json.Unmarshal(out, &st)
		// The shape of fabric8's message, which runSparkSubmit searches
		// for "code=409".
		return fmt.Errorf("io.fabric8.kubernetes.client.KubernetesClientException: Failure executing: POST at: %s. Message: %s. Received status: Status(apiVersion=v1, code=%d, kind=Status, message=%s, reason=%s, status=Failure)",
			url, st.Message, resp.StatusCode, st.Message, st.Reason)
	}
	fmt.Printf("Deployed Spark application %s with application ID %s into Kubernetes\n", s.name,
		pod["metadata"].(map[string]any)["labels"].(map[string]any)["spark-app-selector"])
	return nil
}

// parse reads the arguments buildSparkSubmitArgs produces.
func parse(argv []string) (*submission, error) {
	s := &submission{conf: map[string]string{}}
	withValue := map[string]*string{"--master": &s.master, "--deploy-mode": &s.deployMode, "--name": &s.name, "--class": &s.class}
	ignored := map[string]bool{"--jars": true, "--packages": true, "--exclude-packages": true, "--repositories": true,
		"--py-files": true, "--files": true, "--archives": true, "--proxy-user": true, "--properties-file": true}
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--load-spark-defaults":
		case a == "--conf":
			if i+1 >= len(argv) {
				return nil, errors.New("java.lang.IllegalArgumentException: --conf needs a value")
			}
			i++
			k, v, ok := strings.Cut(argv[i], "=")
			if !ok {
				return nil, fmt.Errorf("java.lang.IllegalArgumentException: Spark config without '=': %s", argv[i])
			}
			s.conf[k] = v
		case withValue[a] != nil || ignored[a]:
			if i+1 >= len(argv) {
				return nil, fmt.Errorf("java.lang.IllegalArgumentException: %s needs a value", a)
			}
			i++
			if p := withValue[a]; p != nil {
				*p = argv[i]
			}
		case strings.HasPrefix(a, "--"):
			return nil, fmt.Errorf("java.lang.IllegalArgumentException: unrecognized option %s", a)
		default:
			s.resource, s.args = a, argv[i+1:]
			i = len(argv)
		}
	}
	return s, nil
}

// driverPod is the pod Spark's KubernetesDriverBuilder would create: the
// pod template (spec.driver.template with the operator's ownerReference:
// its volumes, e.g. a ConfigMap's, and the driver container's mounts reach
// the pod without the operator's webhook), then the driver features the
// operator's confs select.
func driverPod(s *submission) (map[string]any, error) {
	pod := map[string]any{}
	if path := s.conf["spark.kubernetes.driver.podTemplateFile"]; path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("org.apache.spark.SparkException: Could not load pod from template file: %v", err)
		}
		if err := yaml.Unmarshal(b, &pod); err != nil {
			return nil, fmt.Errorf("org.apache.spark.SparkException: Could not load pod from template file %s: %v", path, err)
		}
	}
	meta := sub(pod, "metadata")
	delete(meta, "creationTimestamp")
	spec := sub(pod, "spec")
	ns := s.conf["spark.kubernetes.namespace"]
	if ns == "" {
		ns = "default"
	}
	name := s.conf["spark.kubernetes.driver.pod.name"]
	if name == "" {
		name = s.name + "-" + randHex(8) + "-driver"
	}
	meta["name"], meta["namespace"] = name, ns

	appID := s.conf["spark.app.id"]
	if appID == "" {
		appID = "spark-" + randHex(16)
	}
	labels := sub(meta, "labels")
	annotations := sub(meta, "annotations")
	keys := make([]string, 0, len(s.conf))
	for k := range s.conf {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := s.conf[k]
		switch {
		case strings.HasPrefix(k, "spark.kubernetes.driver.label."):
			labels[strings.TrimPrefix(k, "spark.kubernetes.driver.label.")] = v
		case strings.HasPrefix(k, "spark.kubernetes.driver.annotation."):
			annotations[strings.TrimPrefix(k, "spark.kubernetes.driver.annotation.")] = v
		case strings.HasPrefix(k, "tether.sim."):
			annotations[k] = v
		case strings.HasPrefix(k, "spark.kubernetes.node.selector."):
			sub(spec, "nodeSelector")[strings.TrimPrefix(k, "spark.kubernetes.node.selector.")] = v
		}
	}
	// Spark's own labels (BasicDriverFeatureStep), which win.
	labels["spark-app-selector"] = appID
	labels["spark-role"] = "driver"
	labels["spark-version"] = "3.5.3"
	if len(annotations) == 0 {
		delete(meta, "annotations")
	}

	if sa := s.conf["spark.kubernetes.authenticate.driver.serviceAccountName"]; sa != "" {
		spec["serviceAccountName"] = sa
	}
	spec["restartPolicy"] = "Never"
	image := s.conf["spark.kubernetes.driver.container.image"]
	if image == "" {
		image = s.conf["spark.kubernetes.container.image"]
	}
	if image == "" {
		return nil, errors.New("org.apache.spark.SparkException: Must specify the driver container image")
	}
	pull := s.conf["spark.kubernetes.container.image.pullPolicy"]
	if pull == "" {
		pull = "IfNotPresent"
	}

	containerName := s.conf["spark.kubernetes.driver.podTemplateContainerName"]
	if containerName == "" {
		containerName = driverContainer
	}
	var containers []any
	if c, ok := spec["containers"].([]any); ok {
		containers = c
	}
	// Spark's KubernetesUtils.selectSparkContainer: the template's
	// container named spark.kubernetes.driver.podTemplateContainerName,
	// else its first container, else a new one. The pod keeps the
	// template's volumes and that container its volumeMounts (and the
	// template's other containers stay as they are).
	var c map[string]any
	for _, x := range containers {
		if m, ok := x.(map[string]any); ok && m["name"] == containerName {
			c = m
			break
		}
	}
	if c == nil && len(containers) > 0 {
		c, _ = containers[0].(map[string]any)
	}
	if c == nil {
		c = map[string]any{"name": driverContainer}
		containers = append(containers, c)
	}
	delete(c, "resources")
	c["image"], c["imagePullPolicy"] = image, pull
	args := []any{"driver", "--properties-file", "/opt/spark/conf/spark.properties"}
	if s.class != "" {
		args = append(args, "--class", s.class)
	}
	if s.resource != "" {
		args = append(args, s.resource)
	}
	for _, a := range s.args {
		args = append(args, a)
	}
	c["args"] = args
	env := []any{
		map[string]any{"name": "SPARK_USER", "value": "root"},
		map[string]any{"name": "SPARK_APPLICATION_ID", "value": appID},
		map[string]any{"name": "SPARK_DRIVER_BIND_ADDRESS", "valueFrom": map[string]any{"fieldRef": map[string]any{"apiVersion": "v1", "fieldPath": "status.podIP"}}},
		map[string]any{"name": "SPARK_CONF_DIR", "value": "/opt/spark/conf"},
	}
	for _, k := range keys {
		if n, ok := strings.CutPrefix(k, "spark.kubernetes.driverEnv."); ok {
			env = append(env, map[string]any{"name": n, "value": s.conf[k]})
		}
	}
	c["env"] = env
	c["ports"] = []any{
		map[string]any{"name": "driver-rpc-port", "containerPort": 7078, "protocol": "TCP"},
		map[string]any{"name": "blockmanager", "containerPort": 7079, "protocol": "TCP"},
		map[string]any{"name": "spark-ui", "containerPort": 4040, "protocol": "TCP"},
	}
	res := map[string]any{}
	mem := s.conf["spark.driver.memory"]
	if mem == "" {
		mem = "1g"
	}
	// Spark adds max(10%, 384Mi) of overhead. The stand-in keeps it simple.
	res["memory"] = strings.ToUpper(strings.TrimSuffix(strings.ToLower(mem), "b")) + "i"
	cpu := s.conf["spark.kubernetes.driver.request.cores"]
	if cpu == "" {
		cpu = s.conf["spark.driver.cores"]
	}
	if cpu == "" {
		cpu = "1"
	}
	c["resources"] = map[string]any{"requests": map[string]any{"cpu": cpu, "memory": res["memory"]}, "limits": limits(s.conf, res["memory"])}
	spec["containers"] = containers

	// Local volumes (spark.kubernetes.driver.volumes.<type>.<name>.*),
	// which is all driverVolumeMountsOption passes on: ConfigMap volumes
	// need the operator's webhook.
	if err := volumes(s.conf, spec, c); err != nil {
		return nil, err
	}
	return pod, nil
}

func limits(conf map[string]string, memory any) map[string]any {
	l := map[string]any{"memory": memory}
	if v := conf["spark.kubernetes.driver.limit.cores"]; v != "" {
		l["cpu"] = v
	}
	return l
}

func volumes(conf map[string]string, spec, c map[string]any) error {
	type vol struct {
		typ, path, sub string
		ro             bool
		opts           map[string]string
	}
	vs := map[string]*vol{}
	var names []string
	for k, v := range conf {
		rest, ok := strings.CutPrefix(k, "spark.kubernetes.driver.volumes.")
		if !ok {
			continue
		}
		parts := strings.SplitN(rest, ".", 3)
		if len(parts) != 3 {
			continue
		}
		x := vs[parts[1]]
		if x == nil {
			x = &vol{typ: parts[0], opts: map[string]string{}}
			vs[parts[1]] = x
			names = append(names, parts[1])
		}
		switch {
		case parts[2] == "mount.path":
			x.path = v
		case parts[2] == "mount.subPath":
			x.sub = v
		case parts[2] == "mount.readOnly":
			x.ro = v == "true"
		case strings.HasPrefix(parts[2], "options."):
			x.opts[strings.TrimPrefix(parts[2], "options.")] = v
		}
	}
	sort.Strings(names)
	podVols, _ := spec["volumes"].([]any)
	mounts, _ := c["volumeMounts"].([]any)
	for _, n := range names {
		x := vs[n]
		v := map[string]any{"name": n}
		switch x.typ {
		case "emptyDir":
			e := map[string]any{}
			if x.opts["medium"] != "" {
				e["medium"] = x.opts["medium"]
			}
			if x.opts["sizeLimit"] != "" {
				e["sizeLimit"] = x.opts["sizeLimit"]
			}
			v["emptyDir"] = e
		case "hostPath":
			v["hostPath"] = map[string]any{"path": x.opts["path"]}
		case "persistentVolumeClaim":
			v["persistentVolumeClaim"] = map[string]any{"claimName": x.opts["claimName"]}
		case "nfs":
			v["nfs"] = map[string]any{"path": x.opts["path"], "server": x.opts["server"]}
		default:
			return fmt.Errorf("java.lang.IllegalArgumentException: unsupported volume type %s", x.typ)
		}
		podVols = append(podVols, v)
		m := map[string]any{"name": n, "mountPath": x.path}
		if x.sub != "" {
			m["subPath"] = x.sub
		}
		if x.ro {
			m["readOnly"] = true
		}
		mounts = append(mounts, m)
	}
	if len(podVols) > 0 {
		spec["volumes"] = podVols
	}
	if len(mounts) > 0 {
		c["volumeMounts"] = mounts
	}
	return nil
}

func sub(m map[string]any, key string) map[string]any {
	if v, ok := m[key].(map[string]any); ok {
		return v
	}
	v := map[string]any{}
	m[key] = v
	return v
}

func randHex(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func httpClient() (*http.Client, error) {
	read := func(env string) ([]byte, error) {
		p := os.Getenv(env)
		if p == "" {
			return nil, fmt.Errorf("io.fabric8.kubernetes.client.KubernetesClientException: %s is not set", env)
		}
		return os.ReadFile(p)
	}
	ca, err := read("TETHER_SPARK_SUBMIT_CA")
	if err != nil {
		return nil, err
	}
	certPEM, err := read("TETHER_SPARK_SUBMIT_CERT")
	if err != nil {
		return nil, err
	}
	keyPEM, err := read("TETHER_SPARK_SUBMIT_KEY")
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
	}}, nil
}
