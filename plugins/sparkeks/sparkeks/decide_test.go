package sparkeks

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tetherjobs/tether/pkg/plugin"
)

func TestDecideExisting(t *testing.T) {
	for _, tc := range []struct {
		state, restart string
		deleting       bool
		want           existingAction
	}{
		// Running, about to run, or done. A retry never deletes it.
		{"", "Never", false, actAdopt},
		{"NEW", "Never", false, actAdopt},
		{"SUBMITTED", "Never", false, actAdopt},
		{"RUNNING", "Never", false, actAdopt},
		{"PENDING_RERUN", "Never", false, actAdopt},
		{"SUCCEEDING", "Never", false, actAdopt},
		{"COMPLETED", "Never", false, actAdopt},
		{"UNKNOWN", "Never", false, actAdopt},
		{"INVALIDATING", "Never", false, actAdopt},
		{"FAILING", "Never", false, actAdopt},
		{"RUNNING", "OnFailure", false, actAdopt},
		// Really failed: replaced.
		{"FAILED", "Never", false, actReplace},
		{"FAILED", "OnFailure", false, actReplace}, // terminal whatever the policy
		{"SUBMISSION_FAILED", "Never", false, actReplace},
		{"SUBMISSION_FAILED", "", false, actReplace},
		// The operator may submit it again.
		{"SUBMISSION_FAILED", "OnFailure", false, actAdopt},
		{"SUBMISSION_FAILED", "Always", false, actAdopt},
		// Being deleted (the previous attempt's Cleanup): wait, then submit.
		{"RUNNING", "Never", true, actWaitGone},
		// Not followable safely.
		{"SUSPENDED", "Never", false, actUnsafe},
		{"SUSPENDING", "Never", false, actUnsafe},
		{"RESUMING", "Never", false, actUnsafe},
		{"SOMETHING_NEW", "Never", false, actUnsafe},
	} {
		t.Run(tc.state+"/"+tc.restart, func(t *testing.T) {
			got, why := decideExisting(appStatus{State: tc.state, RestartPolicy: tc.restart, Deleting: tc.deleting})
			assert.Equal(t, tc.want, got, "%s", why)
			assert.NotEmpty(t, why)
		})
	}
}

func TestDriverStarted(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}
	ended := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	pod := func(phase corev1.PodPhase, states ...corev1.ContainerState) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
		for _, st := range states {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{State: st})
		}
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"no pod", nil, false},
		{"pending, image pull", pod(corev1.PodPending, waiting), false},
		{"pending, nothing yet", pod(corev1.PodPending), false},
		{"pending, container running", pod(corev1.PodPending, running), true},
		{"running", pod(corev1.PodRunning, running), true},
		{"succeeded", pod(corev1.PodSucceeded, ended), true},
		{"failed", pod(corev1.PodFailed, ended), true},
		{"unknown phase, container ended", pod(corev1.PodUnknown, ended), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, driverStarted(tc.pod))
		})
	}
}

func TestDecideStuck(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		state       string
		everRunning bool
		after       time.Duration
		timeout     time.Duration
		want        bool
	}{
		{"submitted past timeout", "SUBMITTED", false, 16 * time.Minute, 15 * time.Minute, true},
		{"new past timeout", "", false, 15 * time.Minute, 15 * time.Minute, true},
		{"NEW past timeout", "NEW", false, 20 * time.Minute, 15 * time.Minute, true},
		{"pending rerun past timeout", "PENDING_RERUN", false, 20 * time.Minute, 15 * time.Minute, true},
		{"submitted within timeout", "SUBMITTED", false, 14 * time.Minute, 15 * time.Minute, false},
		{"running", "RUNNING", false, time.Hour, 15 * time.Minute, false},
		{"back to submitted after running", "SUBMITTED", true, time.Hour, 15 * time.Minute, false},
		{"unknown", "UNKNOWN", false, time.Hour, 15 * time.Minute, false},
		{"failed", "FAILED", false, time.Hour, 15 * time.Minute, false},
		{"disabled", "SUBMITTED", false, time.Hour, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, decideStuck(tc.state, tc.everRunning, created, created.Add(tc.after), tc.timeout))
		})
	}
	assert.False(t, decideStuck("SUBMITTED", false, time.Time{}, created, time.Minute), "no creation time: never")
}

func TestFailedOutcome(t *testing.T) {
	for _, tc := range []struct {
		state, message, interrupted, want string
	}{
		{"FAILED", "driver pod not found", "", outcomeUnknown},
		{"FAILED", "driver container failed with ExitCode: 1, Reason: Error", "", outcomeFailed},
		{"FAILED", "driver container failed with ExitCode: 143, Reason: Error", "driver pod d was deleted while it ran", outcomeUnknown},
		{"FAILED", "driver container failed with ExitCode: 137, Reason: Error", "driver pod d was evicted: low on memory", outcomeUnknown},
		{"SUBMISSION_FAILED", "failed to submit spark application", "", outcomeFailed},
	} {
		assert.Equal(t, tc.want, failedOutcome(tc.state, tc.message, tc.interrupted), "%+v", tc)
	}
}

func TestDriverInterrupted(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"no pod", nil, ""},
		{"running", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}, ""},
		{"failed on its own", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Status: corev1.PodStatus{Phase: corev1.PodFailed}}, ""},
		{"being deleted", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "d", DeletionTimestamp: &now}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
			"driver pod d was deleted while it ran"},
		{"evicted", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."}},
			"driver pod d was evicted: The node was low on resource: memory."},
	} {
		assert.Equal(t, tc.want, driverInterrupted(tc.pod), tc.name)
	}
}

func TestFailedClass(t *testing.T) {
	assert.Equal(t, plugin.Retriable, failedClass("SUBMISSION_FAILED"), "no driver ran: a retry is safe")
	assert.Equal(t, plugin.Permanent, failedClass("FAILED"), "the driver ran")
}

func TestBuildAppRestartPolicyAndTTL(t *testing.T) {
	_, app := appFor(t, `{"kubeconfig":"k","time_to_live":"2h"}`, `{"image":"i","main_application_file":"f","query":"q","template":{"spec":{"restartPolicy":{"type":"Never"}}}}`)
	typ, _, _ := unstructured.NestedString(app.Object, "spec", "restartPolicy", "type")
	assert.Equal(t, "Never", typ)
	ttl, _, _ := unstructured.NestedInt64(app.Object, "spec", "timeToLiveSeconds")
	assert.EqualValues(t, 7200, ttl)

	_, app = appFor(t, `{"kubeconfig":"k"}`, minimalCtx)
	typ, _, _ = unstructured.NestedString(app.Object, "spec", "restartPolicy", "type")
	assert.Equal(t, "Never", typ, "forced when the template says nothing")
	ttl, _, _ = unstructured.NestedInt64(app.Object, "spec", "timeToLiveSeconds")
	assert.EqualValues(t, 86400, ttl)
	mode, _, _ := unstructured.NestedString(app.Object, "spec", "mode")
	assert.Equal(t, "cluster", mode)
}

func TestTokenRenewAt(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	assert.Equal(t, now.Add(10*time.Minute), tokenRenewAt(now, now.Add(time.Hour)))
	assert.Equal(t, now.Add(4*time.Minute), tokenRenewAt(now, now.Add(5*time.Minute)), "credentials expire first")
	assert.True(t, !tokenRenewAt(now, now.Add(30*time.Second)).After(now), "expiring now: renewed on the next request")
}

// expiringCreds are temporary credentials expiring at a set time, counting
// how often they are read.
type expiringCreds struct {
	expires time.Time
	reads   int
}

func (c *expiringCreds) Retrieve(context.Context) (aws.Credentials, error) {
	c.reads++
	return aws.Credentials{AccessKeyID: "ASIATEMP", SecretAccessKey: "s", SessionToken: "t", CanExpire: true, Expires: c.expires}, nil
}

func TestEKSTokenRenewalCappedByCredentialExpiry(t *testing.T) {
	creds := &expiringCreds{expires: time.Now().Add(3 * time.Minute)}
	src := newEKSTokenSourceFromConfig(aws.Config{Region: "eu-west-1", Credentials: creds}, "c")
	_, err := src.Token(context.Background())
	require.NoError(t, err)
	// Renewed a minute before the credentials expire, not after 10 minutes.
	assert.WithinDuration(t, creds.expires.Add(-eksCredsMargin), src.renewAt, time.Second)
	assert.True(t, src.renewAt.Before(time.Now().Add(eksTokenRenew)))
}

// statusTransport answers every request with the next status of a script
// (200 when it runs out), recording the Authorization headers.
type statusTransport struct {
	codes []int
	auth  []string
}

func (s *statusTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	s.auth = append(s.auth, req.Header.Get("Authorization"))
	code := http.StatusOK
	if len(s.codes) > 0 {
		code, s.codes = s.codes[0], s.codes[1:]
	}
	return &http.Response{StatusCode: code, Body: http.NoBody, Request: req}, nil
}

func TestEKSTransportDropsARefusedToken(t *testing.T) {
	src := testTokenSource("c")
	next := &statusTransport{codes: []int{http.StatusUnauthorized}}
	rt := src.wrap(next)
	get := func() int {
		req, err := http.NewRequest(http.MethodGet, "https://example.invalid/version", nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusUnauthorized, get())
	assert.Empty(t, src.token, "a token the API server refused is dropped")
	assert.Equal(t, http.StatusOK, get())
	require.Len(t, next.auth, 2)
	assert.True(t, strings.HasPrefix(next.auth[1], "Bearer k8s-aws-v1."), "the next request presigned a new token")

	// A 403 is not about the token. It is kept.
	next.codes = []int{http.StatusForbidden}
	tok := src.token
	assert.Equal(t, http.StatusForbidden, get())
	assert.Equal(t, tok, src.token)
}

func TestDecideBlindCleanup(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	later, earlier := now.Add(time.Minute), now.Add(-time.Minute)
	for _, tc := range []struct {
		name     string
		found    bool
		st       appStatus
		deadline time.Time
		want     blindAction
	}{
		{"gone", false, appStatus{}, later, blindDelete},
		{"being deleted", true, appStatus{State: stateRunning, Deleting: true}, later, blindDelete},
		// The query ran to its end: the evidence of the job's success.
		{"completed", true, appStatus{State: stateCompleted}, later, blindKeep},
		{"completed past the timeout", true, appStatus{State: stateCompleted}, earlier, blindKeep},
		{"failed", true, appStatus{State: stateFailed}, later, blindDelete},
		{"submission failed", true, appStatus{State: stateSubmissionFailed}, later, blindDelete},
		// Still running: it may complete, until its timeout.
		{"running", true, appStatus{State: stateRunning}, later, blindWait},
		{"succeeding", true, appStatus{State: stateSucceeding}, later, blindWait},
		{"submitted", true, appStatus{State: stateSubmitted}, later, blindWait},
		{"unknown", true, appStatus{State: stateUnknown}, later, blindWait},
		{"new", true, appStatus{}, later, blindWait},
		{"running, no timeout", true, appStatus{State: stateRunning}, time.Time{}, blindWait},
		{"running past the timeout", true, appStatus{State: stateRunning}, earlier, blindDelete},
		{"running at the timeout", true, appStatus{State: stateRunning}, now, blindDelete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := decideBlindCleanup(tc.found, tc.st, now, tc.deadline)
			assert.Equal(t, tc.want, got, "%s", why)
			assert.NotEmpty(t, why)
		})
	}
}
