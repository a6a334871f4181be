package e2e

// What the web console's browser tests (ui_test.go, ui_bench_test.go) share.
// A real headless Chromium driven through chromedp, the browser console and
// network requests it saw, waits on DOM conditions, screenshots, and small
// HTTP calls to the API the console talks to.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// screenshotsEnv names the folder the console tests write their screenshots
// to (make ui-screenshots sets it to docs/ui). Unset, a new temp folder.
const screenshotsEnv = "TETHER_UI_SCREENSHOTS"

// uiWait bounds one wait on the page.
const uiWait = 20 * time.Second

// request is one request the browser sent.
type request struct {
	URL    string
	Method string
	Auth   string // the Authorization header, "" when none
}

// browser is one headless Chromium with one tab.
type browser struct {
	t     testing.TB
	ctx   context.Context // the tab's
	shots string          // the screenshots' folder, made by the first shot

	mu       sync.Mutex
	console  []string // every console call, exception and browser log entry
	problems []string // uncaught exceptions and CSP violations: the test fails on any
	requests []request
	dialogs  []string
}

// chromiumPath finds Debian's chromium or fails the test saying how to get it.
func chromiumPath(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("headless Chromium not found: apt-get install chromium (.ci/run installs it)")
	return ""
}

// newBrowser starts a headless Chromium for the test. It stops with the test,
// which then fails on any uncaught JavaScript exception or CSP violation.
func newBrowser(t testing.TB) *browser {
	t.Helper()
	exe := chromiumPath(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox, // tests run as root in CI containers
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		// Chromium's own connections (updates, sync, QUIC probes) are refused
		// on a closed network and slow the start.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("mute-audio", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &browser{t: t}
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithListener(b.onEvent))
	b.ctx = ctx
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.problems) > 0 {
			t.Errorf("the page threw or broke its CSP:\n%s", strings.Join(b.problems, "\n"))
		}
		if t.Failed() {
			t.Logf("browser console:\n%s", strings.Join(b.console, "\n"))
		}
	})
	// The first Run starts the browser. datetime-local inputs and the times
	// the page shows are read in UTC, whatever this machine's zone.
	_, err := chromedp.Call(ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "UTC"})
	require.NoError(t, err, "starting headless Chromium (%s)", exe)
	return b
}

// onEvent runs on the tab's reading goroutine. It records and returns.
func (b *browser) onEvent(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		var parts []string
		for _, a := range e.Args {
			if a.Description != "" {
				parts = append(parts, a.Description)
			} else {
				parts = append(parts, string(a.Value))
			}
		}
		b.console = append(b.console, fmt.Sprintf("console.%s: %s", e.Type, strings.Join(parts, " ")))
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		msg := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			msg += " " + d.Exception.Description
		}
		line := fmt.Sprintf("uncaught exception at %s:%d: %s", d.URL, d.LineNumber+1, msg)
		b.console = append(b.console, line)
		b.problems = append(b.problems, line)
	case *cdplog.EventEntryAdded:
		line := fmt.Sprintf("log %s/%s: %s (%s)", e.Entry.Source, e.Entry.Level, e.Entry.Text, e.Entry.URL)
		b.console = append(b.console, line)
		if e.Entry.Source == "security" || strings.Contains(e.Entry.Text, "Content Security Policy") {
			b.problems = append(b.problems, "CSP violation: "+line)
		}
	case *network.EventRequestWillBeSent:
		r := request{URL: e.Request.URL, Method: e.Request.Method}
		for k, v := range e.Request.Headers {
			if strings.EqualFold(k, "authorization") {
				r.Auth = fmt.Sprint(v)
			}
		}
		b.requests = append(b.requests, r)
	case *page.EventJavascriptDialogOpening:
		b.dialogs = append(b.dialogs, string(e.Type)+": "+e.Message)
		// A dialog blocks the page until answered. The listener must not
		// run a command itself.
		go func() {
			_, _ = chromedp.Call(b.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}()
	}
}

// requestsSeen is a copy of the requests the browser sent so far.
func (b *browser) requestsSeen() []request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]request(nil), b.requests...)
}

func (b *browser) dialogsSeen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.dialogs...)
}

// do runs the actions, failing the test with what was being done.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, uiWait+10*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// open navigates to url and waits for view's first data to be rendered.
func (b *browser) open(url, view string) {
	b.t.Helper()
	b.do("opening "+url, chromedp.Navigate(url))
	b.waitReady(view)
}

// waitReady waits for [data-view=view][data-ready=true].
func (b *browser) waitReady(view string) {
	b.t.Helper()
	b.waitJS(fmt.Sprintf("view %s ready", view), fmt.Sprintf(`!!document.querySelector('[data-view=%q][data-ready="true"]')`, view))
}

// waitJS waits until the JavaScript expression is truthy.
func (b *browser) waitJS(what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, uiWait+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(uiWait), chromedp.WithPollingInterval(25*time.Millisecond))); err != nil {
		b.t.Fatalf("waiting for %s (%s): %v\npage text:\n%s", what, expr, err, b.bodyText())
	}
}

// bodyText is the page's visible text, for failure messages.
func (b *browser) bodyText() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	if len(s) > 4000 {
		s = s[:4000] + "…"
	}
	return s
}

// evalJS evaluates expr in the page into T.
func evalJS[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// text is the textContent of the first element matching the CSS selector
// ("" when none), trimmed.
func (b *browser) text(sel string) string {
	b.t.Helper()
	return evalJS[string](b, fmt.Sprintf(`(document.querySelector(%q) || {textContent: ''}).textContent.trim()`, sel))
}

func (b *browser) count(sel string) int {
	b.t.Helper()
	return evalJS[int](b, fmt.Sprintf(`document.querySelectorAll(%q).length`, sel))
}

// setValue sets an input's value (also to "") and tells the page it changed.
func (b *browser) setValue(sel, value string) {
	b.t.Helper()
	b.do("waiting for "+sel, chromedp.WaitVisible(sel))
	evalJS[chromedp.Void](b, fmt.Sprintf(`(e => {
		e.value = %s;
		e.dispatchEvent(new Event('input', {bubbles: true}));
		e.dispatchEvent(new Event('change', {bubbles: true}));
	})(document.querySelector(%q))`, jsStr(value), sel))
}

func (b *browser) click(sel string) {
	b.t.Helper()
	b.do("clicking "+sel, chromedp.WaitVisible(sel), chromedp.Click(sel))
}

// shot saves a full-page PNG of the page as name (e.g. "jobs.png").
func (b *browser) shot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(b.t, err, "screenshot %s", name)
	if b.shots == "" {
		b.shots = screenshotDir(b.t)
	}
	require.NoError(b.t, os.WriteFile(filepath.Join(b.shots, name), smallerPNG(raw), 0o644))
}

// smallerPNG maps a screenshot onto its 256 most frequent colors. A page is
// flat colors plus anti-aliased text, so it looks the same at a third of
// the size (the docs keep these images in git). It returns raw if that is
// not smaller.
func smallerPNG(raw []byte) []byte {
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		return raw
	}
	bounds := img.Bounds()
	rgba := image.NewRGBA(bounds)
	draw.Draw(rgba, bounds, img, bounds.Min, draw.Src)
	at := func(i int) color.RGBA { return color.RGBA{rgba.Pix[i], rgba.Pix[i+1], rgba.Pix[i+2], rgba.Pix[i+3]} }
	freq := map[color.RGBA]int{}
	for i := 0; i < len(rgba.Pix); i += 4 {
		freq[at(i)]++
	}
	colors := slices.Collect(maps.Keys(freq))
	slices.SortFunc(colors, func(a, b color.RGBA) int { return freq[b] - freq[a] })
	pal := make(color.Palette, 0, 256)
	for _, c := range colors[:min(len(colors), 256)] {
		pal = append(pal, c)
	}
	index := make(map[color.RGBA]uint8, len(colors)) // nearest palette entry, once per color
	for _, c := range colors {
		index[c] = uint8(pal.Index(c))
	}
	out := image.NewPaletted(bounds, pal)
	for i := 0; i < len(rgba.Pix); i += 4 {
		out.Pix[i/4] = index[at(i)]
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&buf, out); err != nil || buf.Len() >= len(raw) {
		return raw
	}
	return buf.Bytes()
}

// phoneShot saves a full-page PNG of the page 390 px wide, as a phone shows it.
func (b *browser) phoneShot(name string) {
	b.t.Helper()
	b.do("emulating a phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(1), chromedp.EmulateMobile))
	// Wait for the layout at the new width before the picture.
	b.waitJS("phone layout", `window.innerWidth === 390`)
	// Wide tables scroll in their wrappers. The page itself does not.
	if w := evalJS[int](b, `document.documentElement.scrollWidth`); w > 390 {
		b.t.Errorf("%s: the page is %d px wide on a 390 px phone", name, w)
	}
	b.shot(name)
	b.do("back to the laptop size", chromedp.EmulateReset())
}

// screenshotDir is $TETHER_UI_SCREENSHOTS, or a new folder kept after the
// test for a person to look at. Either way it is printed.
func screenshotDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(screenshotsEnv)
	if dir != "" {
		require.NoError(t, os.MkdirAll(dir, 0o755))
	} else {
		var err error
		dir, err = os.MkdirTemp("", "tether-ui-"+strings.ReplaceAll(t.Name(), "/", "_")+"-")
		require.NoError(t, err)
	}
	t.Logf("console screenshots: %s", dir)
	fmt.Fprintf(os.Stderr, "%s: console screenshots in %s\n", t.Name(), dir)
	return dir
}

// apiCall sends one request to the agent's API and decodes a JSON answer
// into out (when non-nil). It returns the status code.
func apiCall(t testing.TB, ctx context.Context, method, url, token string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "%s %s", method, url)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "reading the answer to %s %s", method, url)
	if out != nil {
		require.NoError(t, json.Unmarshal(raw, out), "%s %s answered %d: %s", method, url, resp.StatusCode, raw)
	}
	return resp.StatusCode
}

// apiError is the API's error body.
type apiError struct {
	Error string `json:"error"`
	Field string `json:"field"`
	Code  string `json:"code"`
}

// submitAPI submits a job through the HTTP API, as a user would, and returns its id.
func submitAPI(t testing.TB, ctx context.Context, base, token string, body map[string]any) string {
	t.Helper()
	var j struct {
		ID string `json:"id"`
	}
	code := apiCall(t, ctx, http.MethodPost, base+"/api/v1/jobs", token, body, &j)
	require.Equal(t, http.StatusCreated, code, "submitting %v", body)
	require.NotEmpty(t, j.ID)
	return j.ID
}

// logRecord is one NDJSON record of GET /jobs/{id}/logs?format=jsonl.
type logRecord struct {
	Seq     int64  `json:"seq"`
	Attempt int    `json:"attempt"`
	Stream  string `json:"stream"`
	Line    string `json:"line"`
	End     bool   `json:"end"`
}

// storedLog is the job's whole stored log as the API gives it.
func storedLog(t testing.TB, ctx context.Context, base, id string) []logRecord {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/jobs/"+id+"/logs?format=jsonl", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out []logRecord
	dec := json.NewDecoder(resp.Body)
	for dec.More() {
		var r logRecord
		require.NoError(t, dec.Decode(&r))
		if !r.End {
			out = append(out, r)
		}
	}
	return out
}

// pageLog is the log the page shows: one record per span.log-chunk.
func (b *browser) pageLog() []logRecord {
	b.t.Helper()
	return evalJS[[]logRecord](b, `Array.from(document.querySelectorAll('[data-testid=job-logs] span.log-chunk')).map(e => ({
		seq: Number(e.dataset.seq), attempt: Number(e.dataset.attempt), stream: e.dataset.stream, line: e.textContent}))`)
}

// assertSameLog asserts the page shows exactly the stored log. On a
// mismatch it names the records missing from the page and the extra ones.
func assertSameLog(t testing.TB, stored, page []logRecord) bool {
	t.Helper()
	if slices.Equal(stored, page) {
		return true
	}
	key := func(r logRecord) string {
		return fmt.Sprintf("seq %d attempt %d %s: %q", r.Seq, r.Attempt, r.Stream, r.Line)
	}
	count := map[string]int{}
	for _, r := range page {
		count[key(r)]++
	}
	var missing, extra []string
	for _, r := range stored {
		if k := key(r); count[k] > 0 {
			count[k]--
		} else {
			missing = append(missing, k)
		}
	}
	for k, n := range count {
		for range n {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	t.Errorf("the page shows %d log records, the API stored %d: missing from the page (%d):\n  %s\nextra or repeated on the page (%d):\n  %s\n(if both are empty, the order differs)",
		len(page), len(stored), len(missing), strings.Join(missing, "\n  "), len(extra), strings.Join(extra, "\n  "))
	return false
}
