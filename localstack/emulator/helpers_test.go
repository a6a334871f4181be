package emulator

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRateLimitKeys(t *testing.T) {
	for key, ok := range map[string]bool{
		"DescribeTasks": true, "DescribeTasks+ListTasks": true,
		"": false, "+": false, "+ListTasks": false, "ListTasks+": false, "A++B": false,
	} {
		err := RateLimit{Rate: 1}.validate(key)
		require.Equal(t, ok, err == nil, "%q: %v", key, err)
	}
}

func TestClusterName(t *testing.T) {
	for in, want := range map[string]string{
		"":     "default",
		"jobs": "jobs",
		"arn:aws:ecs:us-east-1:000000000000:cluster/jobs": "jobs",
		"x:cluster/jobs": "x:cluster/jobs", // not an ARN
	} {
		require.Equal(t, want, clusterName(in), in)
	}
}

func TestValidClientToken(t *testing.T) {
	long := string(make([]byte, 65))
	for s, ok := range map[string]bool{
		"": true, "abc-123_~!": true, "with space": false, "tab\t": false,
		"caf\u00e9": false, "\xff": false, long[:64]: false, long: false,
	} {
		require.Equal(t, ok, validClientToken(s), "%q", s)
	}
	printable := make([]byte, 64)
	for i := range printable {
		printable[i] = byte(33 + i)
	}
	require.True(t, validClientToken(string(printable)))
}

func TestListTasksFilters(t *testing.T) {
	tk := &task{desiredStatus: "RUNNING", startedBy: "job", group: "service:web", launchType: "EC2", td: &taskDef{family: "fam"}}
	for _, c := range []struct {
		req  listTasksReq
		want bool
	}{
		{listTasksReq{}, true},
		{listTasksReq{DesiredStatus: "RUNNING", StartedBy: "job"}, true},
		{listTasksReq{DesiredStatus: "STOPPED"}, false},
		{listTasksReq{StartedBy: "other"}, false},
		{listTasksReq{Family: "fam", LaunchType: "EC2", ServiceName: "web"}, true},
		{listTasksReq{Family: "other"}, false},
		{listTasksReq{LaunchType: "FARGATE"}, false},
		{listTasksReq{ServiceName: "api"}, false},
		{listTasksReq{ContainerInstance: "ci"}, false},
	} {
		require.Equal(t, c.want, c.req.matches(tk), "%+v", c.req)
	}
	require.False(t, (&listTasksReq{ServiceName: "web"}).matches(&task{group: "web", td: &taskDef{}}))
}

// The paged answers keep the bytes a map of the same keys marshals to.
func TestPagedAnswerBytes(t *testing.T) {
	e := New(Options{})
	t.Cleanup(func() { _ = e.Close() })
	def := `{"family":"f","containerDefinitions":[{"name":"c","image":"i"}]}`
	for range 2 {
		_, err := e.registerTaskDefinition([]byte(def))
		require.NoError(t, err)
	}
	out, err := e.ecsOps()["ListTaskDefinitions"]([]byte(`{"maxResults":1}`))
	require.NoError(t, err)
	b, _ := json.Marshal(out)
	require.Equal(t, `{"nextToken":"o/1","taskDefinitionArns":["arn:aws:ecs:us-east-1:000000000000:task-definition/f:1"]}`, string(b))
	out, err = e.ecsOps()["ListTaskDefinitions"]([]byte(`{"nextToken":"o/1"}`))
	require.NoError(t, err)
	b, _ = json.Marshal(out)
	require.Equal(t, `{"taskDefinitionArns":["arn:aws:ecs:us-east-1:000000000000:task-definition/f:2"]}`, string(b))
	_, err = e.ecsOps()["ListTaskDefinitions"]([]byte(`{"nextToken":"o/-1"}`))
	require.EqualError(t, err, "InvalidParameterException: Invalid nextToken")

	_, err = e.logsOps()["CreateLogGroup"]([]byte(`{"logGroupName":"g"}`))
	require.NoError(t, err)
	for _, body := range []string{`{"logGroupName":"g","logStreamName":"a"}`, `{"logGroupName":"g","logStreamName":"b"}`} {
		_, err := e.logsOps()["CreateLogStream"]([]byte(body))
		require.NoError(t, err)
	}
	out, err = e.logsOps()["DescribeLogStreams"]([]byte(`{"logGroupName":"g","limit":1,"descending":true}`))
	require.NoError(t, err)
	b, _ = json.Marshal(out)
	require.Regexp(t, `^\{"logStreams":\[\{"logStreamName":"b",[^]]*\],"nextToken":"o/1"\}$`, string(b))
	out, err = e.logsOps()["DescribeLogStreams"]([]byte(`{"logGroupName":"g","nextToken":"o/1"}`))
	require.NoError(t, err)
	b, _ = json.Marshal(out)
	require.Regexp(t, `^\{"logStreams":\[\{"logStreamName":"b",[^]]*\]\}$`, string(b))
	_, err = e.logsOps()["DescribeLogStreams"]([]byte(`{"logGroupName":"g","nextToken":"x"}`))
	require.EqualError(t, err, "InvalidParameterException: The specified nextToken is invalid.")
}

func TestEventRangeTokens(t *testing.T) {
	for _, tok := range []string{"f", "5", "x/1", "f/-1", "b/x"} {
		_, _, err := eventRange(tok, false, 0, 10, 3)
		require.Error(t, err, tok)
	}
	start, end, err := eventRange("b/5", false, 0, 10, 3)
	require.NoError(t, err)
	require.Equal(t, [2]int{2, 5}, [2]int{start, end})
}

func TestParseSynth(t *testing.T) {
	for _, c := range []struct {
		vars map[string]string
		want synthSpec
		err  string
	}{
		{nil, synthSpec{lines: 10, interval: time.Second}, ""},
		{map[string]string{"SYNTH_LINES": "0", "SYNTH_INTERVAL": "5ms", "SYNTH_EXIT": "255"}, synthSpec{interval: 5 * time.Millisecond, exit: 255}, ""},
		{map[string]string{"SYNTH_LINES": "-1"}, synthSpec{}, `SYNTH_LINES="-1": want a whole number of lines`},
		{map[string]string{"SYNTH_INTERVAL": "soon"}, synthSpec{}, `SYNTH_INTERVAL="soon": want a Go duration such as 1s`},
		{map[string]string{"SYNTH_INTERVAL": "-1s"}, synthSpec{}, `SYNTH_INTERVAL="-1s": want a Go duration such as 1s`},
		{map[string]string{"SYNTH_EXIT": "256"}, synthSpec{}, `SYNTH_EXIT="256": want an exit code 0-255`},
		// The first bad variable, in the order lines, interval, exit, is the error.
		{map[string]string{"SYNTH_EXIT": "x", "SYNTH_LINES": "x", "SYNTH_INTERVAL": "x"}, synthSpec{}, `SYNTH_LINES="x": want a whole number of lines`},
		{map[string]string{"SYNTH_EXIT": "x", "SYNTH_INTERVAL": "x"}, synthSpec{}, `SYNTH_INTERVAL="x": want a Go duration such as 1s`},
	} {
		got, err := parseSynth(c.vars)
		if c.err != "" {
			require.EqualError(t, err, c.err, "%v", c.vars)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.want, got)
	}
}

func TestReasonSettings(t *testing.T) {
	var o Options
	require.NoError(t, setCapacityReasons(&o, " cpu, ,RESOURCE:X,all"))
	require.Equal(t, append([]string{ReasonResourceCPU, "RESOURCE:X"}, AllCapacityReasons()...), o.CapacityReasons)
	require.NoError(t, setCapacityReasons(&o, " , "))
	require.Nil(t, o.CapacityReasons)
	require.NoError(t, setFailToStartReasons(&o, "a, b | |real"))
	require.Equal(t, append([]string{"a, b"}, RealFailToStartReasons()...), o.FailToStartReasons)
	require.NoError(t, setFailToStartReasons(&o, ""))
	require.Nil(t, o.FailToStartReasons)
}
