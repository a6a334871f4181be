package emulator

import (
	"bytes"
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

type tag struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type cluster struct {
	name string
	arn  string
	tags []tag
}

func newCluster(name string, tags []tag) *cluster {
	return &cluster{name: name, arn: "arn:aws:ecs:" + region + ":" + account + ":cluster/" + name, tags: tags}
}

type kv struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type logConfig struct {
	LogDriver string            `json:"logDriver"`
	Options   map[string]string `json:"options"`
}

// containerDef holds the container fields the emulator acts on. The full
// definition is kept raw so it is echoed back unchanged.
type containerDef struct {
	Name             string     `json:"name"`
	Image            string     `json:"image"`
	Essential        *bool      `json:"essential"`
	Command          []string   `json:"command"`
	EntryPoint       []string   `json:"entryPoint"`
	Environment      []kv       `json:"environment"`
	LogConfiguration *logConfig `json:"logConfiguration"`
	WorkingDirectory string     `json:"workingDirectory"`
}

func (c containerDef) essential() bool { return c.Essential == nil || *c.Essential }

type taskDef struct {
	family         string
	revision       int
	arn            string
	status         string
	raw            map[string]any
	containers     []containerDef
	networkMode    string
	registeredAt   time.Time
	deregisteredAt time.Time
	tags           []tag
}

func (td *taskDef) render() map[string]any {
	m := make(map[string]any, len(td.raw)+6)
	maps.Copy(m, td.raw)
	m["taskDefinitionArn"] = td.arn
	m["family"] = td.family
	m["revision"] = td.revision
	m["status"] = td.status
	m["registeredAt"] = epoch(td.registeredAt)
	m["registeredBy"] = "arn:aws:iam::" + account + ":root"
	if !td.deregisteredAt.IsZero() {
		m["deregisteredAt"] = epoch(td.deregisteredAt)
	}
	if _, ok := m["compatibilities"]; !ok {
		m["compatibilities"] = []string{"EC2", "FARGATE"}
	}
	return m
}

func (e *Emulator) ecsOps() map[string]func([]byte) (any, error) {
	return map[string]func([]byte) (any, error){
		"CreateCluster":            op(e.createCluster),
		"DescribeClusters":         op(e.describeClusters),
		"RegisterTaskDefinition":   e.registerTaskDefinition,
		"DescribeTaskDefinition":   op(e.describeTaskDefinition),
		"ListTaskDefinitions":      op(e.listTaskDefinitions),
		"DeregisterTaskDefinition": op(e.deregisterTaskDefinition),
		"RunTask":                  op(e.runTaskOp),
		"DescribeTasks":            op(e.describeTasks),
		"ListTasks":                op(e.listTasks),
		"StopTask":                 op(e.stopTask),
		"TagResource":              op(e.tagResource),
		"UntagResource":            op(e.untagResource),
		"ListTagsForResource":      op(e.listTagsForResource),
	}
}

// clusterName accepts a short name or a cluster ARN. Empty means "default".
func clusterName(s string) string {
	if name, ok := arnTail(s, ":cluster/"); ok {
		return name
	}
	return cmp.Or(s, "default")
}

// arnTail is what follows marker in s. ok is false unless s is an ARN
// holding marker.
func arnTail(s, marker string) (tail string, ok bool) {
	_, tail, found := strings.Cut(s, marker)
	return tail, found && strings.HasPrefix(s, "arn:")
}

// lookupCluster needs e.mu held.
func (e *Emulator) lookupCluster(s string) (*cluster, error) {
	c, ok := e.clusters[clusterName(s)]
	if !ok {
		return nil, errf("ClusterNotFoundException", "Cluster not found.")
	}
	return c, nil
}

func validateTags(tags []tag) error {
	if len(tags) > 50 {
		return invalidParam("Tags: at most 50 tags are allowed")
	}
	for _, t := range tags {
		if !inRange(len(t.Key), 1, 128) || len(t.Value) > 256 {
			return invalidParam("Tag key must be 1-128 characters and value at most 256 characters")
		}
		if strings.HasPrefix(strings.ToLower(t.Key), "aws:") {
			return invalidParam("Tag keys prefixed with 'aws:' are reserved")
		}
	}
	return nil
}

// mergeTags returns base with add applied (same key replaces).
func mergeTags(base, add []tag) []tag {
	out := append([]tag(nil), base...)
	for _, a := range add {
		replaced := false
		for i := range out {
			if out[i].Key == a.Key {
				out[i].Value, replaced = a.Value, true
			}
		}
		if !replaced {
			out = append(out, a)
		}
	}
	return out
}

func renderCluster(c *cluster, running, pending int, withTags bool) map[string]any {
	m := map[string]any{
		"clusterArn":                        c.arn,
		"clusterName":                       c.name,
		"status":                            "ACTIVE",
		"runningTasksCount":                 running,
		"pendingTasksCount":                 pending,
		"activeServicesCount":               0,
		"registeredContainerInstancesCount": 0,
	}
	if withTags {
		m["tags"] = nonNilTags(c.tags)
	}
	return m
}

func nonNilTags(t []tag) []tag {
	if t == nil {
		return []tag{}
	}
	return t
}

func (e *Emulator) clusterCounts(name string) (running, pending int) {
	for _, t := range e.tasks {
		// An expired task is STOPPED, so neither count holds it.
		if t.cluster != name {
			continue
		}
		switch t.lastStatus {
		case "RUNNING":
			running++
		case "PROVISIONING", "PENDING":
			pending++
		}
	}
	return running, pending
}

func (e *Emulator) createCluster(req struct {
	ClusterName string `json:"clusterName"`
	Tags        []tag  `json:"tags"`
}) (any, error) {
	if err := validateTags(req.Tags); err != nil {
		return nil, err
	}
	name := clusterName(req.ClusterName)
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.clusters[name]
	if !ok {
		// CreateCluster is idempotent in ECS: an existing cluster is returned.
		c = newCluster(name, req.Tags)
		e.clusters[name] = c
	}
	r, p := e.clusterCounts(name)
	return map[string]any{"cluster": renderCluster(c, r, p, true)}, nil
}

func (e *Emulator) describeClusters(req struct {
	Clusters []string `json:"clusters"`
	Include  []string `json:"include"`
}) (any, error) {
	if len(req.Clusters) == 0 {
		req.Clusters = []string{"default"}
	}
	if len(req.Clusters) > 100 {
		return nil, invalidParam("clusters: at most 100 clusters can be described")
	}
	withTags := slices.Contains(req.Include, "TAGS")
	e.mu.Lock()
	defer e.mu.Unlock()
	clusters := []map[string]any{}
	failures := []failure{}
	for _, s := range req.Clusters {
		c, ok := e.clusters[clusterName(s)]
		if !ok {
			arn := s
			if !strings.HasPrefix(s, "arn:") {
				arn = newCluster(s, nil).arn
			}
			failures = append(failures, failure{Arn: arn, Reason: "MISSING"})
			continue
		}
		r, p := e.clusterCounts(c.name)
		clusters = append(clusters, renderCluster(c, r, p, withTags))
	}
	return map[string]any{"clusters": clusters, "failures": failures}, nil
}

type registerTaskDefReq struct {
	Family               string         `json:"family"`
	ContainerDefinitions []containerDef `json:"containerDefinitions"`
	NetworkMode          string         `json:"networkMode"`
	Tags                 []tag          `json:"tags"`
}

func (e *Emulator) registerTaskDefinition(body []byte) (any, error) {
	var raw map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, errf("SerializationException", "decoding request: %v", err)
	}
	var req registerTaskDefReq
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	// cmp.Or keeps the first error.
	if err := cmp.Or(checkFamily(req.Family), checkContainerDefs(req.ContainerDefinitions), validateTags(req.Tags)); err != nil {
		return nil, err
	}
	delete(raw, "tags")
	echoEssential(raw, req.ContainerDefinitions)

	e.mu.Lock()
	defer e.mu.Unlock()
	rev := len(e.families[req.Family]) + 1
	td := &taskDef{
		family:       req.Family,
		revision:     rev,
		arn:          "arn:aws:ecs:" + region + ":" + account + ":task-definition/" + req.Family + ":" + strconv.Itoa(rev),
		status:       "ACTIVE",
		raw:          raw,
		containers:   req.ContainerDefinitions,
		networkMode:  req.NetworkMode,
		registeredAt: time.Now(),
		tags:         req.Tags,
	}
	e.families[req.Family] = append(e.families[req.Family], td)
	return map[string]any{"taskDefinition": td.render(), "tags": nonNilTags(td.tags)}, nil
}

// familyChars are the characters ECS allows in a task definition family.
const familyChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"

func checkFamily(family string) error {
	if !inRange(len(family), 1, 255) {
		return clientErr("Family must be 1-255 characters")
	}
	if strings.Trim(family, familyChars) != "" {
		return clientErr("Family contains invalid characters; allowed are letters, numbers, hyphens and underscores")
	}
	return nil
}

// checkContainerDefs wants at least one container, each with a name of its
// own and an image, and one of them essential.
func checkContainerDefs(defs []containerDef) error {
	if len(defs) == 0 {
		return clientErr("Container list cannot be empty.")
	}
	seen := map[string]bool{}
	for _, c := range defs {
		switch {
		case c.Name == "":
			return clientErr("Container.name should not be null or empty.")
		case c.Image == "":
			return clientErr("Container.image should not be null or empty.")
		case seen[c.Name]:
			return clientErr("Duplicate container name %q", c.Name)
		}
		seen[c.Name] = true
	}
	if !slices.ContainsFunc(defs, containerDef.essential) {
		return clientErr("Task definition must have at least one essential container.")
	}
	return nil
}

// echoEssential makes essential explicit in the raw container definitions
// the emulator echoes, as ECS does.
func echoEssential(raw map[string]any, defs []containerDef) {
	list, _ := raw["containerDefinitions"].([]any)
	for i, d := range list {
		m, ok := d.(map[string]any)
		if !ok {
			continue
		}
		if _, has := m["essential"]; !has {
			m["essential"] = defs[i].essential()
		}
	}
}

// lookupTaskDef resolves family, family:revision or an ARN. e.mu must be held.
// A bare family means its latest ACTIVE revision.
func (e *Emulator) lookupTaskDef(s string) (*taskDef, bool) {
	if tail, ok := arnTail(s, ":task-definition/"); ok {
		s = tail
	}
	family, revStr, hasRev := strings.Cut(s, ":")
	defs := e.families[family]
	if !hasRev {
		for i := len(defs) - 1; i >= 0; i-- {
			if defs[i].status == "ACTIVE" {
				return defs[i], true
			}
		}
		return nil, false
	}
	rev, err := strconv.Atoi(revStr)
	if err != nil || !inRange(rev, 1, len(defs)) {
		return nil, false
	}
	return defs[rev-1], true
}

func (e *Emulator) describeTaskDefinition(req struct {
	TaskDefinition string   `json:"taskDefinition"`
	Include        []string `json:"include"`
}) (any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	td, ok := e.lookupTaskDef(req.TaskDefinition)
	if !ok {
		return nil, clientErr("Unable to describe task definition.")
	}
	out := map[string]any{"taskDefinition": td.render()}
	if slices.Contains(req.Include, "TAGS") {
		out["tags"] = nonNilTags(td.tags)
	}
	return out, nil
}

func (e *Emulator) listTaskDefinitions(req struct {
	FamilyPrefix string `json:"familyPrefix"`
	Status       string `json:"status"`
	Sort         string `json:"sort"`
	MaxResults   *int   `json:"maxResults"`
	NextToken    string `json:"nextToken"`
}) (any, error) {
	limit, err := pageSize(req.MaxResults, 100, "maxResults")
	if err != nil {
		return nil, err
	}
	arns := e.taskDefARNs(req.FamilyPrefix, cmp.Or(req.Status, "ACTIVE"))
	if strings.EqualFold(req.Sort, "DESC") {
		slices.Reverse(arns)
	}
	page, next, err := paginate(arns, req.NextToken, limit, "Invalid nextToken")
	if err != nil {
		return nil, err
	}
	// Fields in name order, as a map would marshal them.
	return struct {
		NextToken          string   `json:"nextToken,omitempty"`
		TaskDefinitionArns []string `json:"taskDefinitionArns"`
	}{next, page}, nil
}

// taskDefARNs lists the ARNs of the revisions in status of the families
// with prefix, by family and revision.
func (e *Emulator) taskDefARNs(prefix, status string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var arns []string
	for _, f := range slices.Sorted(maps.Keys(e.families)) {
		for _, td := range e.families[f] {
			if td.status == status && strings.HasPrefix(f, prefix) {
				arns = append(arns, td.arn)
			}
		}
	}
	return arns
}

// paginate pages a stable list by offset, with "o/<offset>" tokens.
// badToken is the message for a token it cannot read.
func paginate[T any](list []T, token string, limit int, badToken string) ([]T, string, error) {
	start := 0
	if token != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(token, "o/"))
		if err != nil || n < 0 {
			return nil, "", invalidParam("%s", badToken)
		}
		start = min(n, len(list))
	}
	end := min(start+limit, len(list))
	page := append([]T{}, list[start:end]...)
	if end < len(list) {
		return page, "o/" + strconv.Itoa(end), nil
	}
	return page, "", nil
}

func (e *Emulator) deregisterTaskDefinition(req struct {
	TaskDefinition string `json:"taskDefinition"`
}) (any, error) {
	s := req.TaskDefinition
	if i := strings.Index(s, ":task-definition/"); i >= 0 {
		s = s[i+len(":task-definition/"):]
	}
	if !strings.Contains(s, ":") {
		return nil, clientErr("Revision must be specified: use family:revision or the full ARN")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	td, ok := e.lookupTaskDef(s)
	if !ok {
		return nil, clientErr("The specified task definition does not exist.")
	}
	if td.status == "ACTIVE" {
		td.status = "INACTIVE"
		td.deregisteredAt = time.Now()
	}
	return map[string]any{"taskDefinition": td.render()}, nil
}

// resourceTags finds the tag list of a cluster, task definition or task ARN.
// e.mu held.
func (e *Emulator) resourceTags(arn string) (*[]tag, error) {
	switch {
	case strings.Contains(arn, ":cluster/"):
		if c, ok := e.clusters[clusterName(arn)]; ok {
			return &c.tags, nil
		}
	case strings.Contains(arn, ":task-definition/"):
		if strings.Contains(arn[strings.Index(arn, ":task-definition/")+len(":task-definition/"):], ":") {
			if td, ok := e.lookupTaskDef(arn); ok {
				return &td.tags, nil
			}
		}
	case strings.Contains(arn, ":task/"):
		if t, ok := e.liveTask(refID(arn), time.Now()); ok {
			return &t.tags, nil
		}
	default:
		return nil, invalidParam("Invalid resource ARN %q", arn)
	}
	return nil, errf("ResourceNotFoundException", "The specified resource could not be found.")
}

func (e *Emulator) tagResource(req struct {
	ResourceArn string `json:"resourceArn"`
	Tags        []tag  `json:"tags"`
}) (any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	tags, err := e.resourceTags(req.ResourceArn)
	if err != nil {
		return nil, err
	}
	merged := mergeTags(*tags, req.Tags)
	if err := validateTags(merged); err != nil {
		return nil, err
	}
	*tags = merged
	return map[string]any{}, nil
}

func (e *Emulator) untagResource(req struct {
	ResourceArn string   `json:"resourceArn"`
	TagKeys     []string `json:"tagKeys"`
}) (any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	tags, err := e.resourceTags(req.ResourceArn)
	if err != nil {
		return nil, err
	}
	// A copy: rendered responses may still share the old list.
	*tags = slices.DeleteFunc(slices.Clone(*tags), func(t tag) bool { return slices.Contains(req.TagKeys, t.Key) })
	return map[string]any{}, nil
}

func (e *Emulator) listTagsForResource(req struct {
	ResourceArn string `json:"resourceArn"`
}) (any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	tags, err := e.resourceTags(req.ResourceArn)
	if err != nil {
		return nil, err
	}
	return map[string]any{"tags": nonNilTags(append([]tag(nil), *tags...))}, nil
}
