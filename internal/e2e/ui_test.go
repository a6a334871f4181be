package e2e

// The web console (internal/ui) in a real headless Chromium, against real
// agents and PostgreSQL: the pages are driven through the DOM contract of
// docs/ui.md (data-testid, data-view, data-field...), jobs are submitted and
// checked through the HTTP API, and every page visited is saved as a PNG.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tetherjobs/tether/internal/jobstate"
	"github.com/tetherjobs/tether/internal/pgtest"
	"github.com/tetherjobs/tether/internal/store"
)

// freeAddr is a loopback address nothing listens on, for an agent that must
// come back at the same address.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// jsStr quotes s as a JavaScript string literal.
func jsStr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// apiEventKinds is the kinds of the job's events, in order, as the API gives them.
func apiEventKinds(t *testing.T, ctx context.Context, base, id string) []string {
	t.Helper()
	var out struct {
		Events []struct {
			Kind string `json:"kind"`
		} `json:"events"`
	}
	require.Equal(t, http.StatusOK, apiCall(t, ctx, http.MethodGet, base+"/api/v1/jobs/"+id+"/events", "", nil, &out))
	kinds := make([]string, len(out.Events))
	for i, e := range out.Events {
		kinds[i] = e.Kind
	}
	return kinds
}

func (b *browser) timelineKinds() []string {
	b.t.Helper()
	return evalJS[[]string](b, `Array.from(document.querySelectorAll('ol[data-testid=job-timeline] li[data-kind]')).map(e => e.dataset.kind)`)
}

// A job submitted through the API appears in the list served by another
// agent, refreshes in place, and its page tails the log live while the agent
// running it is killed (kill -9) and a second one resumes it, and then while
// the agent serving the page itself is killed and restarted. The timeline
// gains released and resumed, the tail says it reconnects, and in the end
// the page shows the stored log exactly, each line once.
func TestConsoleJobLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := newHarness(t, pgtest.URL(t), fast())
	br := newBrowser(t)

	a := h.startAgent(ctx, "ui-run")
	baseA := "http://" + h.apiAddr(ctx, a)
	id := submitAPI(t, ctx, baseA, "", map[string]any{
		"command": "resumable", "submitter": "ui-e2e",
		"context": map[string]any{"duration_ms": 14000, "tick_ms": 150},
	})
	h.waitHandle(ctx, id, 15*time.Second)
	// Started after the job is claimed. It serves the page, A runs the job.
	listenB := freeAddr(t)
	b := h.startAgent(ctx, "ui-serve", "TETHER_HTTP_LISTEN="+listenB)
	baseB := "http://" + h.apiAddr(ctx, b)

	br.open(baseB+"/#/jobs", "jobs")
	row := fmt.Sprintf(`tr[data-job-id=%q]`, id)
	br.waitJS("the running job's row", fmt.Sprintf(`(c => c && c.textContent.trim() === 'running' && c.classList.contains('status-running'))(document.querySelector('%s td[data-col=status]'))`, row))
	assert.Equal(t, "resumable", br.text(row+" td[data-col=command]"))
	assert.Equal(t, "ui-e2e", br.text(row+" td[data-col=submitter]"))
	assert.Equal(t, "ui-run", br.text(row+" td[data-col=agent]"))

	// A job submitted while the page is open shows up without a reload and
	// its status changes in place.
	br.do("marking the page", chromedp.Evaluate[chromedp.Void](`window.__sameDocument = true`))
	id2 := submitAPI(t, ctx, baseB, "", map[string]any{"command": "resumable", "context": map[string]any{"duration_ms": 300}})
	br.waitJS("the new job's row, succeeded", fmt.Sprintf(`(c => c && c.textContent.trim() === 'succeeded')(document.querySelector('tr[data-job-id=%q] td[data-col=status]'))`, id2))
	assert.True(t, evalJS[bool](br, `window.__sameDocument === true`), "auto-refresh updates the page in place, without a reload")
	assert.NotEmpty(t, br.text(`[data-testid=jobs-refreshed]`), "the page says when it last refreshed")
	rows := evalJS[[]string](br, `Array.from(document.querySelectorAll('table[data-testid=jobs-table] tr[data-job-id]')).map(e => e.dataset.jobId)`)
	assert.Equal(t, []string{id2, id}, rows, "newest first")
	br.shot("jobs.png")

	br.click(fmt.Sprintf(`%s td[data-col=id] a[href="#/jobs/%s"]`, row, id))
	br.waitReady("job")
	assert.Equal(t, "running", br.text(`[data-field=status]`))
	assert.Equal(t, "resumable", br.text(`[data-field=command]`))
	assert.Equal(t, "1", br.text(`[data-field=attempt]`))
	assert.Equal(t, 1, br.count(`table[data-testid=job-limits]`))
	// Every text the tail's status takes, in order, from now on.
	br.do("watching logs-status", chromedp.Evaluate[chromedp.Void](`(() => {
		const el = document.querySelector('[data-testid=logs-status]');
		window.__logStatuses = [el.textContent.trim()];
		new MutationObserver(() => {
			const s = el.textContent.trim();
			if (window.__logStatuses[window.__logStatuses.length - 1] !== s) window.__logStatuses.push(s);
		}).observe(el, {childList: true, characterData: true, subtree: true});
	})()`))
	br.waitJS("following", `document.querySelector('[data-testid=logs-status]').textContent.trim().startsWith('following')`)
	n := br.count(`[data-testid=job-logs] span.log-chunk`)
	br.waitJS("more log lines, live", fmt.Sprintf(`document.querySelectorAll('[data-testid=job-logs] span.log-chunk').length > %d`, n))
	assert.Equal(t, 1, br.count(`[data-testid=job-logs] [data-testid=attempt-sep]`))
	assert.Equal(t, "attempt 1", br.text(`[data-testid=job-logs] [data-testid=attempt-sep]`))

	// The agent running the job dies. The one serving the page resumes it.
	h.kill9(a)
	br.waitJS("released and resumed in the timeline", `['released', 'resumed'].every(k => document.querySelector('ol[data-testid=job-timeline] li[data-kind="' + k + '"]'))`)
	kinds := br.timelineKinds()
	assert.Less(t, slices.Index(kinds, "released"), slices.Index(kinds, "resumed"), "released before resumed: %v", kinds)
	assert.True(t, strings.HasPrefix(br.text(`[data-testid=logs-status]`), "following"), "the page's own agent still serves the tail")
	n = br.count(`[data-testid=job-logs] span.log-chunk`)
	br.waitJS("lines written under the resuming agent", fmt.Sprintf(`document.querySelectorAll('[data-testid=job-logs] span.log-chunk').length > %d`, n))

	// Now the agent serving the page (and running the job) dies and comes
	// back at the same address. The tail is cut without an end record and
	// reconnects after the last line it has.
	h.kill9(b)
	b = h.startAgent(ctx, "ui-serve", "TETHER_HTTP_LISTEN="+listenB)
	require.Equal(t, baseB, "http://"+h.apiAddr(ctx, b))
	br.waitJS("ended: succeeded", `document.querySelector('[data-testid=logs-status]').textContent.trim() === 'ended: succeeded'`)
	statuses := evalJS[[]string](br, `window.__logStatuses`)
	t.Logf("logs-status went through %q", statuses)
	assert.True(t, slices.ContainsFunc(statuses, func(s string) bool { return strings.HasPrefix(s, "reconnecting") }),
		"the tail said it reconnects when its agent died: %q", statuses)
	for _, s := range statuses[:len(statuses)-1] {
		assert.False(t, strings.HasPrefix(s, "ended"), "the tail ended only once, at the end: %q", statuses)
	}

	require.Equal(t, store.StatusSucceeded, h.job(ctx, id).Status)
	stored := storedLog(t, ctx, baseB, id)
	require.NotEmpty(t, stored)
	assertSameLog(t, stored, br.pageLog()) // exactly: every line once, in order
	br.waitJS("status succeeded", `document.querySelector('[data-field=status]').textContent.trim() === 'succeeded'`)
	want := apiEventKinds(t, ctx, baseB, id)
	br.waitJS("the whole timeline", fmt.Sprintf(`JSON.stringify(Array.from(document.querySelectorAll('ol[data-testid=job-timeline] li[data-kind]')).map(e => e.dataset.kind)) === %s`, jsStr(string(mustJSON(t, want)))))
	br.shot("job.png")
	br.phoneShot("job-phone.png")
	assert.Empty(t, br.dialogsSeen())
}

// Cancel and requeue from the job's page, offered only where the job's
// state allows them, with the API's refusals shown where they belong. A
// requeue with no reason gets the field error next to the reason, a
// finished job says why it offers no action, and a time filter the API
// refuses its error next to the filter.
func TestConsoleCancelAndRequeue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// This test is about the console, not the lease. With fast()'s 250 ms
	// keepalive the self-fence point is about 0.7 s of silence, which a
	// loaded machine under -race reached once: the job was retried under
	// the test's cancel.
	tm := fast()
	tm.Keepalive, tm.StaleJob, tm.OfflineAfter = time.Second, 10*time.Second, 3*time.Second
	h := newHarness(t, pgtest.URL(t), tm)
	br := newBrowser(t)
	a := h.startAgent(ctx, "ui-act")
	base := "http://" + h.apiAddr(ctx, a)

	long := submitAPI(t, ctx, base, "", map[string]any{"command": "shell", "context": map[string]any{
		"script": fmt.Sprintf(`echo $$ > %q/"$TETHER_JOB_ID".pid; echo started; sleep 60`, h.pidDir)}})
	done := submitAPI(t, ctx, base, "", map[string]any{"command": "shell", "context": map[string]any{"script": "echo done"}})

	br.open(base+"/#/jobs/"+long, "job")
	br.waitJS("running", `document.querySelector('[data-field=status]').textContent.trim() === 'running'`)
	// A running job offers Cancel only, and says why not Requeue.
	br.waitJS("requeue not offered while running", `document.querySelector('[data-testid=requeue-form]').hidden && !document.querySelector('[data-testid=cancel-form]').hidden`)
	assert.Contains(t, br.text(`[data-testid=actions-why]`), "No Requeue: only failed or canceled jobs can be requeued; this one is running.")
	const reason = "stopped from the console"
	br.setValue("#cancel-reason", reason)
	br.click(`button[data-testid=cancel-submit]`)
	br.waitJS("action-ok", `(e => e && e.textContent.trim() !== '')(document.querySelector('[data-testid=action-ok]'))`)
	br.waitJS("canceled", `document.querySelector('[data-field=status]').textContent.trim() === 'canceled'`)
	j := h.job(ctx, long)
	require.Equal(t, store.StatusCanceled, j.Status)
	assert.True(t, slices.ContainsFunc(h.events(ctx, long), func(e event) bool { return e.Kind == "cancel_requested" && strings.Contains(e.Message, reason) }),
		"the reason typed is the one recorded: %s", h.eventSummary(ctx, long))
	br.shot("cancel.png")

	// Requeue with no reason: the API's field error, next to the field.
	var refused apiError
	require.Equal(t, http.StatusBadRequest, apiCall(t, ctx, http.MethodPost, base+"/api/v1/jobs/"+long+"/requeue", "", map[string]any{"reason": ""}, &refused))
	require.Equal(t, "reason", refused.Field)
	br.setValue("#requeue-reason", "")
	br.click(`button[data-testid=requeue-submit]`)
	br.waitJS("the reason's field error", fmt.Sprintf(`(e => e && e.textContent.includes(%s))(document.querySelector('[data-error-for=requeue-reason]'))`, jsStr(refused.Error)))
	assert.Equal(t, 1, h.job(ctx, long).Attempt, "a refused requeue changes nothing")
	br.shot("requeue-error.png")

	br.setValue("#requeue-reason", "retry after the fix")
	br.setValue("#requeue-key", "ui-requeue-1")
	br.click(`button[data-testid=requeue-submit]`)
	br.waitJS("action-ok after the requeue", `(e => e && e.textContent.trim() !== '')(document.querySelector('[data-testid=action-ok]'))`)
	br.waitJS("attempt 2", `document.querySelector('[data-field=attempt]').textContent.trim() === '2'`)
	br.waitJS("the field error gone", `(e => !e || e.textContent.trim() === '')(document.querySelector('[data-error-for=requeue-reason]'))`)
	j = h.job(ctx, long)
	assert.Equal(t, 2, j.Attempt)
	assert.Contains(t, []jobstate.JobStatus{store.StatusQueued, store.StatusAccepted, store.StatusRunning}, j.Status)
	assert.True(t, slices.ContainsFunc(h.events(ctx, long), func(e event) bool {
		return e.Kind == "requeued" && strings.Contains(e.Message, "retry after the fix")
	}), h.eventSummary(ctx, long))
	br.waitJS("requeued in the timeline", `!!document.querySelector('ol[data-testid=job-timeline] li[data-kind=requeued]')`)

	// A finished job offers neither action and says why; the API would
	// refuse a cancel (409).
	h.waitTerminal(ctx, []string{done}, 20*time.Second)
	var conflict apiError
	require.Equal(t, http.StatusConflict, apiCall(t, ctx, http.MethodPost, base+"/api/v1/jobs/"+done+"/cancel", "", map[string]any{"reason": "too late"}, &conflict))
	br.open(base+"/#/jobs/"+done, "job")
	assert.Equal(t, "succeeded", br.text(`[data-field=status]`))
	assert.True(t, evalJS[bool](br, `document.querySelector('[data-testid=cancel-form]').hidden && document.querySelector('[data-testid=requeue-form]').hidden`),
		"no action is offered on a succeeded job")
	why := br.text(`[data-testid=actions-why]`)
	assert.Contains(t, why, "No Cancel: the job is succeeded, and a finished job cannot be canceled.")
	assert.Contains(t, why, "No Requeue: only failed or canceled jobs can be requeued; this one is succeeded.")
	assert.Equal(t, store.StatusSucceeded, h.job(ctx, done).Status)
	br.shot("actions-finished.png")

	// A time window the API refuses (since after until): its field error.
	br.open(base+"/#/jobs", "jobs")
	before := len(br.requestsSeen())
	br.setValue("#filter-since", "2030-01-02T03:04")
	br.setValue("#filter-until", "2030-01-01T00:00")
	br.click(`button[data-testid=filters-apply]`)
	var sent string
	deadline := time.Now().Add(uiWait)
	for sent == "" {
		for _, r := range br.requestsSeen()[before:] {
			if strings.Contains(r.URL, "/api/v1/jobs?") && strings.Contains(r.URL, "since=") {
				sent = r.URL
			}
		}
		if sent == "" {
			require.True(t, time.Now().Before(deadline), "the page sent no jobs request with since=: %v", br.requestsSeen()[before:])
			sleep(ctx, 25*time.Millisecond)
		}
	}
	u, err := url.Parse(sent)
	require.NoError(t, err)
	assert.Equal(t, "2030-01-02T03:04:00Z", strings.Replace(u.Query().Get("since"), ".000Z", "Z", 1), "datetime-local sent as RFC 3339 UTC")
	var bad apiError
	require.Equal(t, http.StatusBadRequest, apiCall(t, ctx, http.MethodGet, sent, "", nil, &bad), "the API refuses since after until")
	require.Contains(t, []string{"since", "until"}, bad.Field)
	br.waitJS("the filter's field error", fmt.Sprintf(`(e => e && e.textContent.includes(%s))(document.querySelector('[data-error-for=filter-%s]'))`, jsStr(bad.Error), bad.Field))
	assert.Contains(t, evalJS[string](br, `location.hash`), "since=", "the filters live in the hash")
	br.shot("filter-error.png")
}

// With tokens on, the console asks for one, refuses a wrong one with the
// API's text, and keeps the right one in sessionStorage only: never in a URL
// (the page's or any request's), never in the agent's log. Every API request
// carries it as a bearer token. Logout forgets it.
func TestConsoleTokenLogin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newHarness(t, pgtest.URL(t), fast())
	br := newBrowser(t)
	raw := make([]byte, 16)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	token := "tok-" + hex.EncodeToString(raw)
	a := h.startAgent(ctx, "ui-auth", "TETHER_API_TOKENS=alice:"+token)
	base := "http://" + h.apiAddr(ctx, a)
	id := submitAPI(t, ctx, base, token, map[string]any{"command": "shell", "context": map[string]any{"script": "echo hi"}})

	loginShown := `!!document.querySelector('[data-view=login] form[data-testid=login-form]')`
	br.do("opening /", chromedp.Navigate(base+"/"))
	br.waitJS("the login form", loginShown)
	assert.True(t, slices.ContainsFunc(br.requestsSeen(), func(r request) bool { return strings.Contains(r.URL, "/api/v1/") && r.Auth == "" }),
		"the page asked the API first and got its 401")
	assert.Equal(t, "password", evalJS[string](br, `document.querySelector('#login-token').type`))
	assert.True(t, evalJS[bool](br, `document.querySelector('#login-token').labels.length > 0`), "the token input has a label")
	assert.True(t, evalJS[bool](br, `(e => !e || e.hidden || e.offsetParent === null)(document.querySelector('button[data-testid=logout]'))`), "no logout without a token")
	br.shot("login.png")

	var refused apiError
	require.Equal(t, http.StatusUnauthorized, apiCall(t, ctx, http.MethodGet, base+"/api/v1/commands", "wrong-token", nil, &refused))
	br.setValue("#login-token", "wrong-token")
	br.click(`button[data-testid=login-submit]`)
	br.waitJS("the refusal", fmt.Sprintf(`(e => e && e.textContent.includes(%s))(document.querySelector('[data-testid=login-error]'))`, jsStr(refused.Error)))
	assert.True(t, evalJS[bool](br, `!sessionStorage.getItem('tether.token')`), "a refused token is not kept")

	before := len(br.requestsSeen())
	br.setValue("#login-token", token)
	br.click(`button[data-testid=login-submit]`)
	br.waitReady("jobs")
	br.waitJS("the job's row", fmt.Sprintf(`!!document.querySelector('tr[data-job-id=%q]')`, id))
	assert.Equal(t, "alice", br.text(fmt.Sprintf(`tr[data-job-id=%q] td[data-col=submitter]`, id)), "the token decides the submitter")
	assert.Equal(t, token, evalJS[string](br, `sessionStorage.getItem('tether.token')`))
	assert.NotContains(t, evalJS[string](br, `location.href`), token)
	assert.NotContains(t, evalJS[string](br, `JSON.stringify(Object.assign({}, localStorage)) + document.cookie`), token, "not in localStorage or cookies")
	br.open(base+"/#/jobs/"+id, "job")
	br.waitJS("the job's log", `document.querySelector('[data-testid=logs-status]').textContent.trim().startsWith('ended')`)

	var authed int
	for _, r := range br.requestsSeen() {
		assert.NotContains(t, r.URL, token, "a request URL carries the token")
	}
	for _, r := range br.requestsSeen()[before:] {
		if strings.Contains(r.URL, "/api/v1/") {
			assert.Equal(t, "Bearer "+token, r.Auth, "request %s %s", r.Method, r.URL)
			authed++
		}
	}
	assert.Positive(t, authed, "the page called the API after the login")
	assert.NotContains(t, a.out.String(), token, "the agent logged the token")

	br.click(`button[data-testid=logout]`)
	br.waitJS("the login form after logout", loginShown)
	assert.True(t, evalJS[bool](br, `!sessionStorage.getItem('tether.token')`), "logout forgets the token")
	// Refused without one. A deep link asks for the token again.
	br.do("opening the jobs list", chromedp.Navigate(base+"/#/jobs"))
	br.waitJS("the login form for a deep link", loginShown)
}

// Job output and fields are hostile. Markup in them renders as text, runs
// nothing, loads nothing.
func TestConsoleHostileOutput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newHarness(t, pgtest.URL(t), fast())
	br := newBrowser(t)
	a := h.startAgent(ctx, "ui-hostile")
	base := "http://" + h.apiAddr(ctx, a)

	lines := []string{`<img src=x onerror=alert(1)>`, `<script>alert(2)</script>`, `"quoted" & <b>bold</b>`}
	script := `printf '%s\n'`
	for _, l := range lines {
		script += " '" + l + "'"
	}
	submitter := `<img src=y onerror=alert(3)>`
	id := submitAPI(t, ctx, base, "", map[string]any{"command": "shell", "submitter": submitter, "context": map[string]any{"script": script}})
	h.waitTerminal(ctx, []string{id}, 20*time.Second)
	require.Equal(t, store.StatusSucceeded, h.job(ctx, id).Status)

	br.open(base+"/#/jobs", "jobs")
	assert.Equal(t, submitter, br.text(fmt.Sprintf(`tr[data-job-id=%q] td[data-col=submitter]`, id)))
	br.open(base+"/#/jobs/"+id, "job")
	br.waitJS("ended: succeeded", `document.querySelector('[data-testid=logs-status]').textContent.trim() === 'ended: succeeded'`)
	assert.Equal(t, submitter, br.text(`[data-field=submitter]`))
	stored := storedLog(t, ctx, base, id)
	require.Len(t, stored, len(lines))
	for i, l := range lines {
		require.Equal(t, l, stored[i].Line)
	}
	assertSameLog(t, stored, br.pageLog()) // every line, as text
	assert.Zero(t, br.count(`main img, main script, main b`), "job output made elements")
	br.shot("hostile.png")
	assert.Empty(t, br.dialogsSeen(), "job output opened a dialog")
	for _, r := range br.requestsSeen() {
		assert.NotRegexp(t, `/(x|y)$`, r.URL, "job output loaded an image")
	}
}

// The agents, commands and cleanups pages, and what every page owes a
// keyboard or screen reader user.
func TestConsolePagesAndAccessibility(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := newHarness(t, pgtest.URL(t), fast())
	br := newBrowser(t)
	live := h.startAgent(ctx, "ui-live")
	gone := h.startAgent(ctx, "ui-gone")
	base := "http://" + h.apiAddr(ctx, live)

	// A command no agent offers, with a queued job and a Cleanup that keeps
	// failing (due in an hour, so no worker takes it meanwhile).
	orphan, _, err := h.st.Submit(ctx, store.SubmitParams{Command: "orphan", Plugin: "shell", Context: json.RawMessage(`{}`), Submitter: "e2e"})
	require.NoError(t, err)
	_, err = h.pool.Exec(ctx, `INSERT INTO cleanups (job_id, plugin, command, attempt, reason, attempts, next_at, last_error)
		VALUES ($1, 'shell', 'orphan', 1, 'canceled', 3, now() + interval '1 hour', 'remote API said no')`, orphan.ID)
	require.NoError(t, err)
	h.kill9(gone)

	br.open(base+"/#/agents", "agents")
	if !evalJS[bool](br, `document.querySelector('#agents-all').checked`) {
		br.click("#agents-all")
	}
	// The liveness check finds the killed agent dead (its name lock free,
	// silent past dead_after): the console shows the janitor's verdict,
	// with the reason as the badge's title.
	br.waitJS("the killed agent, found dead", `(r => r && r.classList.contains('stale') && r.textContent.includes('dead') && r.querySelector('[data-liveness=dead]').title.includes('name lock free'))(document.querySelector('tr[data-agent=ui-gone][data-live=false][data-liveness=dead]'))`)
	assert.Equal(t, 1, br.count(`tr[data-agent=ui-live][data-live=true]`))
	assert.Contains(t, br.text(`tr[data-agent=ui-live]`), "/10", "load against capacity")
	br.shot("agents.png")
	checkAccessible(t, br, "agents")

	type command struct {
		Name   string `json:"name"`
		Served bool   `json:"served"`
		Hint   string `json:"hint"`
	}
	var cmds struct {
		Commands []command `json:"commands"`
	}
	require.Equal(t, http.StatusOK, apiCall(t, ctx, http.MethodGet, base+"/api/v1/commands", "", nil, &cmds))
	i := slices.IndexFunc(cmds.Commands, func(c command) bool { return c.Name == "orphan" })
	require.GreaterOrEqual(t, i, 0)
	require.NotEmpty(t, cmds.Commands[i].Hint)
	br.open(base+"/#/commands", "commands")
	br.waitJS("the unserved command", `!!document.querySelector('tr[data-command=orphan][data-served=false]')`)
	assert.Contains(t, br.text(`tr[data-command=orphan]`), cmds.Commands[i].Hint)
	assert.Equal(t, 1, br.count(`tr[data-command=shell][data-served=true]`))
	br.shot("commands.png")
	checkAccessible(t, br, "commands")

	// The live agent announces its shell plugin failing its health check:
	// the command is served by nobody healthy, and both pages say who and why.
	_, err = h.pool.Exec(ctx, `UPDATE agents SET unhealthy_plugins = '{"shell": "backend unreachable"}' WHERE name = 'ui-live'`)
	require.NoError(t, err)
	br.waitJS("the command served only by an unhealthy agent", `(r => r && r.querySelector('[data-testid=unhealthy]').textContent.includes('ui-live'))(document.querySelector('tr[data-command=shell][data-served=false]'))`)
	assert.Contains(t, br.text(`tr[data-command=shell]`), "fails its health check on ui-live")
	br.open(base+"/#/agents", "agents")
	br.waitJS("the unhealthy plugin's badge", `(b => b && b.textContent.includes('shell unhealthy') && b.querySelector('[title="backend unreachable"]') !== null)(document.querySelector('tr[data-agent=ui-live] [data-testid=unhealthy-plugins]'))`)

	br.open(base+"/#/cleanups", "cleanups")
	crow := fmt.Sprintf(`table[data-testid=cleanups-table] tr[data-job-id=%q]`, orphan.ID)
	br.waitJS("the pending cleanup", fmt.Sprintf(`!!document.querySelector('%s a[href="#/jobs/%s"]')`, crow, orphan.ID))
	assert.Contains(t, br.text(crow), "remote API said no")
	assert.Contains(t, br.text(crow), "3")
	br.shot("cleanups.png")
	checkAccessible(t, br, "cleanups")

	br.open(base+"/#/jobs/"+orphan.ID, "job")
	assert.Equal(t, "queued", br.text(`[data-field=status]`))
	checkAccessible(t, br, "job")

	br.open(base+"/#/jobs", "jobs")
	checkAccessible(t, br, "jobs")
	// Keyboard: on a freshly loaded page, Tab reaches the skip link first,
	// then the nav's links before anything in the view.
	br.do("a fresh page", chromedp.Navigate("about:blank"))
	br.open(base+"/#/jobs", "jobs")
	var stops []string
	var navOutline string
	for range 8 {
		br.do("Tab", chromedp.KeyEvent(kb.Tab))
		stops = append(stops, evalJS[string](br, `(e => e.closest('nav') ? 'nav:' + (e.dataset.testid || e.textContent.trim())
			: e.closest('main') ? 'main:' + e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')
			: e.tagName.toLowerCase() + (e.className ? '.' + e.className : ''))(document.activeElement)`))
		if stops[len(stops)-1] == "nav:nav-jobs" {
			navOutline = evalJS[string](br, `getComputedStyle(document.activeElement).outlineStyle`)
		}
		if strings.HasPrefix(stops[len(stops)-1], "main:") {
			break
		}
	}
	t.Logf("Tab stops from the top: %q", stops)
	require.NotEmpty(t, stops)
	assert.Equal(t, "a.skip", stops[0], "the first Tab stop is the skip link")
	nav := slices.Index(stops, "nav:nav-jobs")
	main := slices.IndexFunc(stops, func(s string) bool { return strings.HasPrefix(s, "main:") })
	assert.True(t, nav > 0 && (main < 0 || nav < main), "the nav comes before the view: %q", stops)
	assert.NotContains(t, []string{"", "none"}, navOutline, "the keyboard focus is visible (an outline)")
}

// checkAccessible asserts from Chromium's accessibility tree that every
// control of the page has a name, and from the DOM that every input and
// select has a <label>.
func checkAccessible(t *testing.T, br *browser, page string) {
	t.Helper()
	// The roles whose every element needs an accessible name.
	interactive := []string{"button", "link", "textbox", "searchbox", "checkbox", "combobox", "radio", "spinbutton"}
	res, err := chromedp.Call(br.ctx, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{})
	require.NoError(t, err, "reading the accessibility tree")
	var controls int
	for _, n := range res.Nodes {
		if n.Ignored || n.Role == nil {
			continue
		}
		var role, name string
		_ = json.Unmarshal(n.Role.Value, &role)
		if !slices.Contains(interactive, role) {
			continue
		}
		controls++
		if n.Name != nil {
			_ = json.Unmarshal(n.Name.Value, &name)
		}
		assert.NotEmpty(t, strings.TrimSpace(name), "page %s: a %s (DOM node %d) has no accessible name", page, role, n.BackendDOMNodeID)
	}
	assert.Positive(t, controls, "page %s: no controls in the accessibility tree", page)
	unlabeled := evalJS[[]string](br, `Array.from(document.querySelectorAll('input, select, textarea'))
		.filter(e => e.type !== 'hidden' && e.labels.length === 0).map(e => e.outerHTML)`)
	assert.Empty(t, unlabeled, "page %s: inputs without a <label>", page)
}
