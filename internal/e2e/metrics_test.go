package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
)

// scrape returns an agent's /metrics text.
func (h *harness) scrape(ctx context.Context, a *agentProc) string {
	h.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.apiAddr(ctx, a)+"/metrics", nil)
	require.NoError(h.t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(h.t, err, "reading agent %s's metrics", a.name)
	defer resp.Body.Close()
	require.Equal(h.t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	return string(body)
}

// A real agent process exports the SRE signals as the job goes: claim
// latency and job duration by command, the API request counted under its
// route pattern, and the janitor's queue gauges for each configured command.
func TestAgentExportsJobAndAPIMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newHarness(t, pgtest.URL(t), fast())
	a := h.startAgent(ctx, "metrics-a")
	id := h.submitShell(ctx, 0)
	h.waitTerminal(ctx, []string{id}, 30*time.Second)

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.apiAddr(ctx, a)+"/api/v1/jobs/"+id, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	want := []string{
		`tether_claim_latency_seconds_count{command="shell"} 1`,
		`tether_job_duration_seconds_count{command="shell",status="succeeded"} 1`,
		`tether_attempt_duration_seconds_count{command="shell",outcome="succeeded"} 1`,
		`tether_http_requests_total{code="200",route="GET /api/v1/jobs/{id}"} 1`,
		`tether_queue_jobs{command="resumable"} 0`,
		`tether_command_live_agents{command="shell"} 1`,
		`tether_cleanups_pending 0`,
	}
	// The last scrape and what it lacked, kept under mu: Eventually may
	// still run a check when it gives up.
	var (
		mu      sync.Mutex
		text    string
		missing []string
	)
	ok := assert.Eventually(t, func() bool {
		got := h.scrape(ctx, a)
		var lack []string
		for _, w := range want {
			if !strings.Contains(got, w+"\n") {
				lack = append(lack, w)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		text, missing = got, lack
		return len(lack) == 0
	}, 20*time.Second, 100*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.True(t, ok, "agent metrics lack %q", missing)
	assert.NotContains(t, text, `route="GET /api/v1/jobs/`+id, "never the raw path")
}
