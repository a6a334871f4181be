package e2e

// The console's operator views in a real headless Chromium: counts per
// status, the agent filter, failure reasons, bulk actions, the attempt
// table, retries used up, times with their zone, the log's times, search
// and download, a frozen agent, and remote resources first.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
	"github.com/tetherjobs/tether/pkg/api"
)

// roomy are fast() timings with a keepalive a loaded machine keeps: these
// tests are about the console, not the lease.
func roomy() timings {
	tm := fast()
	tm.Keepalive, tm.StaleJob, tm.OfflineAfter = time.Second, 10*time.Second, 3*time.Second
	return tm
}

// consoleSetup starts a harness with roomy timings, one agent named name
// and a browser, for a test of at most within. It answers the agent's API
// base URL and the agent.
func consoleSetup(t *testing.T, within time.Duration, name string) (context.Context, *harness, *browser, *agentProc, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	t.Cleanup(cancel)
	h := newHarness(t, pgtest.URL(t), roomy())
	br := newBrowser(t)
	a := h.startAgent(ctx, name)
	return ctx, h, br, a, "http://" + h.apiAddr(ctx, a)
}

// waitStatus waits until the job has status (read from the database).
func (h *harness) waitStatus(ctx context.Context, id string, status api.JobStatus, within time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for h.job(ctx, id).Status != status {
		require.True(h.t, time.Now().Before(deadline), "job %s is %s, not %s, after %s: %s", id, h.job(ctx, id).Status, status, within, h.eventSummary(ctx, id))
		sleep(ctx, 50*time.Millisecond)
	}
}

// countText is what the counts bar shows for status ("all" for the total).
func (b *browser) countText(status string) string {
	b.t.Helper()
	return b.text(fmt.Sprintf(`[data-testid=job-counts] a[data-status=%q] .count-n`, status))
}

func (b *browser) waitCount(status, want string) {
	b.t.Helper()
	b.waitJS(status+" count "+want, fmt.Sprintf(`(e => e && e.textContent.trim() === %s)(document.querySelector('[data-testid=job-counts] a[data-status=%q] .count-n'))`, jsStr(want), status))
}

// The list counts jobs per status like the API, filters by the agent
// holding them, says why each failed, and cancels and requeues a selection
// through the per-job endpoints: one confirmation naming the count and the
// filter, each job audited in its own timeline, refusals reported per job.
func TestConsoleCountsAgentFilterAndBulk(t *testing.T) {
	ctx, h, br, _, base := consoleSetup(t, 120*time.Second, "ui-bulk")

	var failed, running []string
	for i := range 3 {
		failed = append(failed, submitAPI(t, ctx, base, "", map[string]any{"command": "shell", "submitter": "bulk",
			"context": map[string]any{"script": fmt.Sprintf("echo disk %d full >&2; exit 3", i)}}))
	}
	for range 2 {
		running = append(running, submitAPI(t, ctx, base, "", map[string]any{"command": "shell", "submitter": "bulk",
			"context": map[string]any{"script": "echo started; sleep 60"}}))
	}
	h.waitTerminal(ctx, failed, 20*time.Second)
	for _, id := range running {
		h.waitStatus(ctx, id, store.StatusRunning, 20*time.Second)
	}

	br.open(base+"/#/jobs", "jobs")
	br.waitCount("failed", "3")
	br.waitCount("running", "2")
	br.waitCount("all", "5")
	var counts api.JobCounts
	require.Equal(t, http.StatusOK, apiCall(t, ctx, http.MethodGet, base+"/api/v1/jobs/counts", "", nil, &counts))
	for _, c := range counts.Counts {
		assert.Equal(t, fmt.Sprint(c.Count), br.countText(string(c.Status)), "the page's %s count is the API's", c.Status)
	}
	// Each failed row says why.
	for _, id := range failed {
		j := h.job(ctx, id)
		require.NotEmpty(t, j.Error)
		assert.Equal(t, string(j.ErrorClass)+": "+j.Error, br.text(fmt.Sprintf(`tr[data-job-id=%q] td[data-col=reason]`, id)))
	}
	br.shot("jobs-reasons.png")

	// The agent filter: the jobs ui-bulk holds now, and their counts.
	br.setValue("#filter-agent", "ui-bulk")
	br.click(`button[data-testid=filters-apply]`)
	br.waitCount("all", "2")
	br.waitJS("only the held rows", `document.querySelectorAll('table[data-testid=jobs-table] tr[data-job-id]').length === 2`)
	rows := evalJS[[]string](br, `Array.from(document.querySelectorAll('table[data-testid=jobs-table] tr[data-job-id]')).map(e => e.dataset.jobId)`)
	assert.ElementsMatch(t, running, rows)
	assert.Contains(t, evalJS[string](br, `location.hash`), "agent=ui-bulk")
	br.shot("jobs-agent.png")

	// Bulk requeue of the failed ones: one confirmation, the API's field
	// error for a missing reason (nothing sent further), then each job.
	br.open(base+"/#/jobs?status=failed", "jobs")
	br.waitJS("3 failed rows", `document.querySelectorAll('table[data-testid=jobs-table] tr[data-job-id]').length === 3`)
	br.click(`input[data-testid=select-all]`)
	br.waitJS("requeue 3", `document.querySelector('[data-testid=bulk-requeue]').textContent.trim() === 'Requeue 3 selected…'`)
	assert.True(t, evalJS[bool](br, `document.querySelector('[data-testid=bulk-cancel]').disabled`), "no cancel of finished jobs")
	br.click(`button[data-testid=bulk-requeue]`)
	assert.Equal(t, "Requeue 3 of the 3 selected jobs, selected from: status=failed. Each is sent on its own, as from its page, and recorded in its timeline.",
		br.text(`[data-testid=bulk-question]`))
	br.click(`button[data-testid=bulk-confirm-submit]`)
	br.waitJS("the reason's field error", `(e => e && !e.hidden && e.textContent.includes('reason is required'))(document.querySelector('[data-error-for=bulk-reason]'))`)
	for _, id := range failed {
		assert.Equal(t, 1, h.job(ctx, id).Attempt, "a refused request changes no job")
	}
	br.setValue("#bulk-reason", "disk cleaned")
	br.shot("bulk-confirm.png")
	br.click(`button[data-testid=bulk-confirm-submit]`)
	br.waitJS("the summary", `(e => e && e.textContent.trim() === '3 of 3 requeued.')(document.querySelector('[data-testid=bulk-summary]'))`)
	for _, id := range failed {
		assert.True(t, slices.ContainsFunc(h.events(ctx, id), func(e event) bool { return e.Kind == "requeued" && strings.Contains(e.Message, "disk cleaned") }),
			"each job is audited as a single requeue: %s", h.eventSummary(ctx, id))
	}
	h.waitTerminal(ctx, failed, 20*time.Second) // they fail again

	// Bulk cancel of everything submitter=bulk shows, one running job
	// having been canceled behind the page's back: the finished ones are
	// not sent, the canceled one is refused by the API, the other canceled.
	br.open(base+"/#/jobs?submitter=bulk", "jobs")
	br.waitJS("5 rows, 2 running", `document.querySelectorAll('table[data-testid=jobs-table] tr[data-job-id]').length === 5 &&
		document.querySelectorAll('table[data-testid=jobs-table] td[data-col=status].status-running').length === 2`)
	br.click(`#auto-refresh`)
	require.Equal(t, http.StatusOK, apiCall(t, ctx, http.MethodPost, base+"/api/v1/jobs/"+running[0]+"/cancel", "", map[string]any{"reason": "behind the page"}, nil))
	h.waitStatus(ctx, running[0], store.StatusCanceled, 20*time.Second)
	br.click(`input[data-testid=select-all]`)
	br.waitJS("cancel 2", `document.querySelector('[data-testid=bulk-cancel]').textContent.trim() === 'Cancel 2 selected…'`)
	br.click(`button[data-testid=bulk-cancel]`)
	assert.Contains(t, br.text(`[data-testid=bulk-question]`), "Cancel 2 of the 5 selected jobs, selected from: submitter=bulk.")
	br.setValue("#bulk-reason", "maintenance window")
	br.click(`button[data-testid=bulk-confirm-submit]`)
	br.waitJS("the summary", `(e => e && e.textContent.trim() === '1 of 2 canceled; 1 refused; 3 not sent.')(document.querySelector('[data-testid=bulk-summary]'))`)
	var conflict apiError
	require.Equal(t, http.StatusConflict, apiCall(t, ctx, http.MethodPost, base+"/api/v1/jobs/"+running[0]+"/cancel", "", map[string]any{}, &conflict))
	assert.Contains(t, br.text(fmt.Sprintf(`[data-testid=bulk-result] li[data-job-id=%q]`, running[0])), conflict.Error, "the refusal is the API's, per job")
	h.waitStatus(ctx, running[1], store.StatusCanceled, 20*time.Second)
	assert.True(t, slices.ContainsFunc(h.events(ctx, running[1]), func(e event) bool {
		return e.Kind == "cancel_requested" && strings.Contains(e.Message, "maintenance window")
	}), h.eventSummary(ctx, running[1]))
	br.shot("bulk-result.png")
	assert.Empty(t, br.dialogsSeen())
}

// A job whose retries are used up: the page says so in words, shows one
// attempt row per try with its duration and error, times with their zone
// in each mode, and the log's times on demand, search and a download of
// the whole stored log.
func TestConsoleAttemptsTimesAndLog(t *testing.T) {
	ctx, h, br, _, base := consoleSetup(t, 90*time.Second, "ui-att")
	id := submitAPI(t, ctx, base, "", map[string]any{"command": "shell",
		"limits":  map[string]any{"max_retry": 2, "retry_backoff": "0s"},
		"context": map[string]any{"script": "echo connecting; echo warning: slow disk >&2; exit 75", "retry_exit_codes": []int{75}}})
	h.waitTerminal(ctx, []string{id}, 30*time.Second)
	j := h.job(ctx, id)
	require.Equal(t, store.StatusFailed, j.Status, h.eventSummary(ctx, id))
	require.Equal(t, 3, j.Attempt)

	br.open(base+"/#/jobs/"+id, "job")
	br.waitJS("retries exhausted", `document.querySelector('[data-field=error_class]').textContent.trim() === 'retries exhausted (3/3)'`)
	var attempts api.AttemptList
	require.Equal(t, http.StatusOK, apiCall(t, ctx, http.MethodGet, base+"/api/v1/jobs/"+id+"/attempts", "", nil, &attempts))
	require.Len(t, attempts.Attempts, 3)
	br.waitJS("three attempt rows", `document.querySelectorAll('table[data-testid=job-attempts] tbody tr[data-attempt]').length === 3`)
	outcomes := evalJS[[]string](br, `Array.from(document.querySelectorAll('table[data-testid=job-attempts] tbody tr')).map(e => e.dataset.outcome)`)
	assert.Equal(t, []string{"retry_scheduled", "retry_scheduled", "failed"}, outcomes)
	for i, d := range evalJS[[]string](br, `Array.from(document.querySelectorAll('table[data-testid=job-attempts] td[data-col=duration]')).map(e => e.textContent.trim())`) {
		assert.Regexp(t, `^[0-9.]+(ms|s)$|^[0-9]+m[0-9]+s$`, d, "attempt %d's duration", i+1)
	}
	assert.Contains(t, br.text(`table[data-testid=job-attempts] tbody tr:last-child td[data-col=error]`), "75")
	assert.NotEmpty(t, br.text(`[data-field=run_time]`), "how long it ran")
	assert.NotEmpty(t, br.text(`[data-field=queued_for]`), "how long it waited")
	assert.Contains(t, br.text(`[data-testid=actions-why]`), "No Cancel: the job is failed")

	// Times: UTC by default, each with its zone; local with the browser's
	// offset; relative.
	_, err := chromedp.Call(br.ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Asia/Kolkata"})
	require.NoError(t, err)
	created := `document.querySelector('[data-field=created_at] time')`
	assert.Equal(t, strings.Replace(j.CreatedAt.UTC().Format("2006-01-02 15:04:05"), "T", " ", 1)+" UTC", br.text(`[data-field=created_at] time`))
	br.setValue("#time-mode", "local")
	br.waitJS("local time with its offset", created+`.textContent === `+jsStr(j.CreatedAt.In(time.FixedZone("IST", 5*3600+1800)).Format("2006-01-02 15:04:05")+" UTC+05:30"))
	br.shot("job-times-local.png")
	br.setValue("#time-mode", "relative")
	br.waitJS("relative time", created+`.textContent.endsWith(' ago')`)
	br.setValue("#time-mode", "utc")
	br.waitJS("UTC again", created+`.textContent.endsWith(' UTC')`)

	// The log: every stored line, each time on demand, search, download.
	br.waitJS("ended", `document.querySelector('[data-testid=logs-status]').textContent.trim() === 'ended: failed'`)
	stored := storedLog(t, ctx, base, id)
	assertSameLog(t, stored, br.pageLog())
	before := `getComputedStyle(document.querySelector('[data-testid=job-logs] span.log-chunk'), '::before').content`
	assert.Equal(t, "none", evalJS[string](br, before), "no times unless asked")
	br.click(`#logs-times`)
	br.waitJS("the first line's time", before+` !== 'none'`)
	assert.Regexp(t, `^"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC "$`, evalJS[string](br, before))
	assert.Equal(t, "connecting", br.text(`[data-testid=job-logs] span.log-chunk`), "the time is not part of the line's text")
	br.setValue("#logs-search", "SLOW DISK")
	br.waitJS("3 matches", `document.querySelector('[data-testid=logs-found]').textContent.trim() === '1 of 3 matching lines'`)
	br.click(`button[data-testid=logs-find-next]`)
	br.waitJS("the second", `document.querySelector('[data-testid=logs-found]').textContent.trim() === '2 of 3 matching lines'`)
	assert.Equal(t, 3, br.count(`[data-testid=job-logs] span.log-chunk.match[data-stream=stderr]`))
	br.shot("job-attempts.png")

	dir := t.TempDir()
	_, err = chromedp.Call(br.ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
		Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dir})
	require.NoError(t, err)
	br.click(`button[data-testid=logs-download]`)
	br.waitJS("saved", `document.querySelector('[data-testid=logs-download-status]').textContent.startsWith('saved ')`)
	file := filepath.Join(dir, "tether-job-"+id+".log")
	var got []byte
	for deadline := time.Now().Add(uiWait); ; {
		if got, err = os.ReadFile(file); err == nil && len(got) > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "no file %s: %v", file, err)
		sleep(ctx, 50*time.Millisecond)
	}
	var want strings.Builder
	for _, r := range stored {
		want.WriteString(r.Line + "\n")
	}
	assert.Equal(t, want.String(), string(got), "the download is the whole stored log")
}

// The page of a job whose agent froze (SIGSTOP) says so while it is silent,
// and stops saying it once the agent heartbeats again.
func TestConsoleFrozenAgent(t *testing.T) {
	ctx, h, br, runner, runnerBase := consoleSetup(t, 60*time.Second, "ui-frozen")
	id := submitAPI(t, ctx, runnerBase, "", map[string]any{"command": "shell",
		"context": map[string]any{"script": "echo started; sleep 60"}})
	h.waitStatus(ctx, id, store.StatusRunning, 20*time.Second)
	watch := h.startAgent(ctx, "ui-watch")
	base := "http://" + h.apiAddr(ctx, watch)

	br.open(base+"/#/jobs/"+id, "job")
	assert.True(t, evalJS[bool](br, `document.querySelector('[data-testid=agent-health]').hidden`), "a live agent needs no word")
	h.signal(runner, syscall.SIGSTOP)
	resumed := false
	defer func() {
		if !resumed {
			h.signal(runner, syscall.SIGCONT)
		}
	}()
	br.waitJS("the agent is late", `(e => !e.hidden && e.dataset.liveness === 'late')(document.querySelector('[data-testid=agent-health]'))`)
	assert.Contains(t, br.text(`[data-testid=agent-health]`), "Agent ui-frozen is late")
	br.shot("agent-late.png")
	h.signal(runner, syscall.SIGCONT)
	resumed = true
	// Live again, the box goes (whatever the agent then does with a job it
	// held past its self-fence point).
	br.waitJS("live again", `document.querySelector('[data-testid=agent-health]').hidden`)
}

// An ECS job's page puts its remote resources (the task, its log stream,
// the console link and the aws command) above everything else.
func TestConsoleRemoteResourcesFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, url := startEmulator(t)
	h := newECSHarness(t, pgtest.URL(t), fast(), url)
	a := h.startAgent(ctx, "ui-ecs")
	base := "http://" + h.apiAddr(ctx, a)
	id := h.submitECS(ctx, countingScript(2, 50*time.Millisecond), nil)
	h.waitTerminal(ctx, []string{id}, 30*time.Second)
	br := newBrowser(t)
	br.open(base+"/#/jobs/"+id, "job")
	br.waitJS("the task", `!!document.querySelector('[data-testid=job-resources] li[data-resource-kind=ecs_task]')`)
	assert.True(t, evalJS[bool](br, `(() => {
		const res = document.querySelector('[data-testid=job-resources]').closest('section');
		const details = document.getElementById('h-fields').closest('section');
		return !res.hidden && res.getBoundingClientRect().top < details.getBoundingClientRect().top &&
			res.getBoundingClientRect().top < window.innerHeight / 2;
	})()`), "the resources come first, in the top half of the screen")
	assert.Contains(t, br.text(`[data-testid=job-resources] li[data-resource-kind=ecs_task] .command code`), "aws ecs describe-tasks")
	br.shot("job-ecs.png")
}
