package emulator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	cwltypes "github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/require"
)

// noHostPrefix keeps StartLiveTail on the emulator's host. The SDK puts
// "stream-" before the endpoint's host, which a local address lacks.
func noHostPrefix(o *cloudwatchlogs.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("NoHostPrefix",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				return next.HandleInitialize(smithyhttp.DisableEndpointHostPrefix(ctx, true), in)
			}), middleware.Before)
	})
}

// liveEnv starts an emulator and returns a client for StartLiveTail.
// Each session needs a client of its own: the SDK's event stream decoder
// is one per client and two streams on it race (go test -race shows it).
func liveEnv(t *testing.T, opts Options) (*env, func() *cloudwatchlogs.Client) {
	e := start(t, opts)
	return e, func() *cloudwatchlogs.Client {
		return cloudwatchlogs.NewFromConfig(clientConfig(1), func(o *cloudwatchlogs.Options) {
			o.BaseEndpoint = aws.String(e.url)
			o.HTTPClient = ownBody{awshttp.NewBuildableClient()}
		}, noHostPrefix)
	}
}

func putLines(t *testing.T, ctx context.Context, c *cloudwatchlogs.Client, group, stream string, from, n int) {
	t.Helper()
	var evs []cwltypes.InputLogEvent
	for i := range n {
		evs = append(evs, cwltypes.InputLogEvent{Timestamp: aws.Int64(time.Now().UnixMilli()), Message: aws.String(fmt.Sprintf("line %d", from+i))})
	}
	_, err := c.PutLogEvents(ctx, &cloudwatchlogs.PutLogEventsInput{LogGroupName: aws.String(group), LogStreamName: aws.String(stream), LogEvents: evs})
	require.NoError(t, err)
}

func makeStreams(t *testing.T, ctx context.Context, c *cloudwatchlogs.Client, group string, streams ...string) {
	t.Helper()
	_, err := c.CreateLogGroup(ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String(group)})
	require.NoError(t, err)
	for _, s := range streams {
		_, err := c.CreateLogStream(ctx, &cloudwatchlogs.CreateLogStreamInput{LogGroupName: aws.String(group), LogStreamName: aws.String(s)})
		require.NoError(t, err)
	}
}

// nextEvent reads the stream's next event, failing on its end.
func nextEvent(t *testing.T, ctx context.Context, es *cloudwatchlogs.StartLiveTailEventStream) cwltypes.StartLiveTailResponseStream {
	t.Helper()
	select {
	case ev, ok := <-es.Events():
		require.True(t, ok, "stream ended: %v", es.Err())
		return ev
	case <-ctx.Done():
		t.Fatal("no live tail event in time")
	}
	return nil
}

// updates reads sessionUpdates until want events arrived, and returns them.
func updates(t *testing.T, ctx context.Context, es *cloudwatchlogs.StartLiveTailEventStream, want int) (got []cwltypes.LiveTailSessionLogEvent, sampled bool) {
	t.Helper()
	for len(got) < want {
		u, ok := nextEvent(t, ctx, es).(*cwltypes.StartLiveTailResponseStreamMemberSessionUpdate)
		require.True(t, ok)
		got = append(got, u.Value.SessionResults...)
		sampled = sampled || (u.Value.SessionMetadata != nil && u.Value.SessionMetadata.Sampled)
	}
	return got, sampled
}

// The SDK's own client reads the session: sessionStart, then updates with
// exactly the events ingested after the start, in the named streams only.
func TestLiveTailWireProtocol(t *testing.T) {
	e, client := liveEnv(t, Options{})
	ctx := ctxT(t)
	makeStreams(t, ctx, e.logs, "g", "a", "b")
	putLines(t, ctx, e.logs, "g", "a", 0, 3) // before the session: not sent
	out, err := client().StartLiveTail(ctx, &cloudwatchlogs.StartLiveTailInput{
		LogGroupIdentifiers: []string{logGroupArn("g")}, LogStreamNames: []string{"a"},
	})
	require.NoError(t, err)
	es := out.GetStream()
	defer es.Close()
	st, ok := nextEvent(t, ctx, es).(*cwltypes.StartLiveTailResponseStreamMemberSessionStart)
	require.True(t, ok)
	require.Equal(t, []string{"a"}, st.Value.LogStreamNames)
	require.NotEmpty(t, aws.ToString(st.Value.SessionId))
	putLines(t, ctx, e.logs, "g", "a", 3, 2)
	putLines(t, ctx, e.logs, "g", "b", 0, 2) // not in the filter
	got, sampled := updates(t, ctx, es, 2)
	require.False(t, sampled)
	require.Len(t, got, 2)
	for i, ev := range got {
		require.Equal(t, fmt.Sprintf("line %d", 3+i), aws.ToString(ev.Message))
		require.Equal(t, "a", aws.ToString(ev.LogStreamName))
		require.Equal(t, logGroupArn("g"), aws.ToString(ev.LogGroupIdentifier))
		require.NotZero(t, aws.ToInt64(ev.IngestionTime))
	}
	require.Equal(t, 1, e.em.LiveTailSessions())
}

// More than 500 events in a second come sampled down to 500.
func TestLiveTailSamples(t *testing.T) {
	e, client := liveEnv(t, Options{})
	ctx := ctxT(t)
	makeStreams(t, ctx, e.logs, "g", "job/c/1")
	out, err := client().StartLiveTail(ctx, &cloudwatchlogs.StartLiveTailInput{
		LogGroupIdentifiers: []string{logGroupArn("g")}, LogStreamNamePrefixes: []string{"job/"},
	})
	require.NoError(t, err)
	es := out.GetStream()
	defer es.Close()
	_ = nextEvent(t, ctx, es)
	putLines(t, ctx, e.logs, "g", "job/c/1", 0, 800)
	got, sampled := updates(t, ctx, es, 500)
	require.True(t, sampled)
	require.Len(t, got, 500)
}

// Requests the reference refuses, and the account's session limit.
func TestLiveTailRefusals(t *testing.T) {
	e, client := liveEnv(t, Options{LiveTail: LiveTail{Sessions: 1}})
	ctx := ctxT(t)
	makeStreams(t, ctx, e.logs, "g", "a")
	arn := logGroupArn("g")
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	for name, in := range map[string]*cloudwatchlogs.StartLiveTailInput{
		"InvalidParameterException/names and prefixes": {LogGroupIdentifiers: []string{arn}, LogStreamNames: []string{"a"}, LogStreamNamePrefixes: []string{"a"}},
		"InvalidParameterException/101 names":          {LogGroupIdentifiers: []string{arn}, LogStreamNames: many},
		"InvalidParameterException/names, two groups":  {LogGroupIdentifiers: []string{arn, arn}, LogStreamNames: []string{"a"}},
		"InvalidParameterException/a name, not an ARN": {LogGroupIdentifiers: []string{"g"}},
		"ResourceNotFoundException/no such group":      {LogGroupIdentifiers: []string{logGroupArn("nope")}},
	} {
		_, err := client().StartLiveTail(ctx, in)
		require.Equal(t, name[:len(errorCodeOf(err))], errorCodeOf(err), "%s: %v", name, err)
	}
	out, err := client().StartLiveTail(ctx, &cloudwatchlogs.StartLiveTailInput{LogGroupIdentifiers: []string{arn}})
	require.NoError(t, err)
	_ = nextEvent(t, ctx, out.GetStream())
	_, err = client().StartLiveTail(ctx, &cloudwatchlogs.StartLiveTailInput{LogGroupIdentifiers: []string{arn}})
	require.Equal(t, "LimitExceededException", errorCodeOf(err), "%v", err)
	require.NoError(t, out.GetStream().Close())
	require.Eventually(t, func() bool { return e.em.LiveTailSessions() == 0 }, 5*time.Second, 10*time.Millisecond)
}

// A session past its duration ends with SessionTimeoutException, one that
// fails with SessionStreamingException; the SDK reports each as the
// stream's error.
func TestLiveTailEnds(t *testing.T) {
	for _, c := range []struct {
		lt   LiveTail
		want string
	}{
		{LiveTail{Duration: 1500 * time.Millisecond}, "SessionTimeoutException"},
		{LiveTail{ErrorRate: 1}, "SessionStreamingException"},
	} {
		e, client := liveEnv(t, Options{LiveTail: c.lt})
		ctx := ctxT(t)
		makeStreams(t, ctx, e.logs, "g", "a")
		out, err := client().StartLiveTail(ctx, &cloudwatchlogs.StartLiveTailInput{LogGroupIdentifiers: []string{logGroupArn("g")}})
		require.NoError(t, err)
		es := out.GetStream()
		for range es.Events() {
		}
		require.Equal(t, c.want, errorCodeOf(es.Err()), "%v", es.Err())
		require.Eventually(t, func() bool { return e.em.LiveTailSessions() == 0 }, 5*time.Second, 10*time.Millisecond)
	}
}

func errorCodeOf(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// ownBody gives the transport its own copy of the request body: smithy-go
// closes the body as Do returns, which can race the transport's last read
// of it and close the connection under the streaming answer (the ECS
// plugin does the same).
type ownBody struct{ c cloudwatchlogs.HTTPClient }

func (o ownBody) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	return o.c.Do(req)
}
