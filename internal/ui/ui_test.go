package ui

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, target string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestServesAssetsWithTypesAndSecurityHeaders(t *testing.T) {
	h := Handler()
	cases := []struct {
		target, ctype, contains string
	}{
		{"/", "text/html; charset=utf-8", `<script type="module" src="/ui/app.js">`},
		{"/ui/app.js", "text/javascript; charset=utf-8", "import"},
		{"/ui/app.css", "text/css; charset=utf-8", ":root"},
		{"/ui/favicon.svg", "image/svg+xml", "<svg"},
	}
	for _, c := range cases {
		rec := get(t, h, http.MethodGet, c.target, nil)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: status %d, want 200", c.target, rec.Code)
		}
		if got := rec.Header().Get("Content-Type"); got != c.ctype {
			t.Errorf("GET %s: Content-Type %q, want %q", c.target, got, c.ctype)
		}
		if !strings.Contains(rec.Body.String(), c.contains) {
			t.Errorf("GET %s: body lacks %q", c.target, c.contains)
		}
		checkSecurityHeaders(t, c.target, rec.Header())
	}
}

func checkSecurityHeaders(t *testing.T, target string, hdr http.Header) {
	t.Helper()
	want := map[string]string{
		"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
			"connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "no-referrer",
		"X-Frame-Options":        "DENY",
		"Cache-Control":          "no-cache",
	}
	for k, v := range want {
		if got := hdr.Get(k); got != v {
			t.Errorf("%s: %s = %q, want %q", target, k, got, v)
		}
	}
}

func TestETagAndNotModified(t *testing.T) {
	h := Handler()
	first := get(t, h, http.MethodGet, "/ui/app.js", nil)
	etag := first.Header().Get("ETag")
	if !regexp.MustCompile(`^"[0-9a-f]{32}"$`).MatchString(etag) {
		t.Fatalf("ETag %q, want a quoted hex digest", etag)
	}
	if other := get(t, h, http.MethodGet, "/ui/app.css", nil).Header().Get("ETag"); other == etag {
		t.Errorf("app.css and app.js share ETag %s", etag)
	}
	if again := get(t, Handler(), http.MethodGet, "/ui/app.js", nil).Header().Get("ETag"); again != etag {
		t.Errorf("a second Handler gives ETag %s, want the content's %s", again, etag)
	}

	for _, inm := range []string{etag, "W/" + etag, `"other", ` + etag} {
		rec := get(t, h, http.MethodGet, "/ui/app.js", http.Header{"If-None-Match": {inm}})
		if rec.Code != http.StatusNotModified {
			t.Errorf("If-None-Match %s: status %d, want 304", inm, rec.Code)
		}
		if rec.Body.Len() != 0 {
			t.Errorf("If-None-Match %s: 304 with a %d-byte body", inm, rec.Body.Len())
		}
		checkSecurityHeaders(t, "304", rec.Header())
	}
	if rec := get(t, h, http.MethodGet, "/ui/app.js", http.Header{"If-None-Match": {`"stale"`}}); rec.Code != http.StatusOK {
		t.Errorf("stale If-None-Match: status %d, want 200", rec.Code)
	}
}

func TestHead(t *testing.T) {
	h := Handler()
	full := get(t, h, http.MethodGet, "/", nil)
	rec := get(t, h, http.MethodHead, "/", nil)
	if rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Fatalf("HEAD /: status %d with %d body bytes, want 200 and none", rec.Code, rec.Body.Len())
	}
	if got, want := rec.Header().Get("Content-Length"), full.Header().Get("Content-Length"); got != want || got == "" {
		t.Errorf("HEAD / Content-Length %q, GET's %q", got, want)
	}
}

func TestUnknownFileIsJSONNotFound(t *testing.T) {
	h := Handler()
	for _, target := range []string{"/ui/nope.js", "/ui/", "/ui/../ui.go", "/index.html", "/ui/assets/app.js"} {
		rec := get(t, h, http.MethodGet, target, nil)
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: status %d, want 404", target, rec.Code)
			continue
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("GET %s: Content-Type %q, want application/json", target, ct)
		}
		var body struct{ Error, Code string }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("GET %s: body %q is not JSON: %v", target, rec.Body, err)
		}
		if body.Code != "not_found" || body.Error == "" {
			t.Errorf("GET %s: body %+v, want code not_found and an error text", target, body)
		}
		checkSecurityHeaders(t, target, rec.Header())
	}
}

// embedded answers every embedded asset by name.
func embedded(t *testing.T) map[string]string {
	t.Helper()
	files := make(map[string]string)
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(assets, p)
		files[strings.TrimPrefix(p, "assets/")] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestAssetsAreCSPAndXSSClean enforces what the CSP and hostile job output
// need: no inline script, style or handler, and no HTML-parsing sinks.
func TestAssetsAreCSPAndXSSClean(t *testing.T) {
	forbidden := []struct {
		re   *regexp.Regexp
		why  string
		only string // file extension it applies to; "" = all
	}{
		{regexp.MustCompile(`(?i)\sstyle\s*=`), "style= attribute", ""},
		{regexp.MustCompile(`(?i)<style\b`), "inline <style>", ".html"},
		{regexp.MustCompile(`(?i)\son[a-z]+\s*=\s*["']`), "on*= handler attribute", ".html"},
		{regexp.MustCompile(`setAttribute\(\s*['"](?:style|on[a-z]+)['"]`), "style or handler set as an attribute", ".js"},
		{regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function\(`), "HTML or code parsing sink", ""},
		{regexp.MustCompile(`(?i)https?://(?:[a-z0-9-]+\.)+[a-z]{2,}`), "external URL (no CDN)", ".html"},
		{regexp.MustCompile(`localStorage`), "localStorage (the token belongs in sessionStorage)", ".js"},
	}
	files := embedded(t)
	if len(files) < 4 {
		t.Fatalf("only %d embedded files", len(files))
	}
	for name, body := range files {
		if path.Ext(name) == ".html" {
			if tag := inlineScript(body); tag != "" {
				t.Errorf("%s: inline script %s (give it a src)", name, tag)
			}
		}
		for _, f := range forbidden {
			if f.only != "" && path.Ext(name) != f.only {
				continue
			}
			if loc := f.re.FindStringIndex(body); loc != nil {
				t.Errorf("%s: %s: %q", name, f.why, body[loc[0]:min(loc[1]+20, len(body))])
			}
		}
	}
}

// inlineScript answers the first <script> tag without a src, or "".
func inlineScript(html string) string {
	for _, tag := range regexp.MustCompile(`(?i)<script\b[^>]*>`).FindAllString(html, -1) {
		if !regexp.MustCompile(`(?i)\ssrc\s*=`).MatchString(tag) {
			return tag
		}
	}
	return ""
}

func TestScanCatchesInlineScript(t *testing.T) {
	for _, html := range []string{`<script>alert(1)</script>`, `<p><script type="module">x</script>`} {
		if inlineScript(html) == "" {
			t.Errorf("inlineScript misses %s", html)
		}
	}
	if tag := inlineScript(`<script type="module" src="/ui/app.js"></script>`); tag != "" {
		t.Errorf("inlineScript flags a script with src: %s", tag)
	}
}

// TestEveryReferenceIsEmbedded checks that each module a script imports,
// and each /ui/ file index.html names, is served.
func TestEveryReferenceIsEmbedded(t *testing.T) {
	files := embedded(t)
	h := Handler()
	imports := regexp.MustCompile(`(?m)(?:^\s*import\s[^'"]*|\bfrom\s*|\bimport\()\s*['"]([^'"]+)['"]`)
	found := 0
	for name, body := range files {
		if path.Ext(name) != ".js" {
			continue
		}
		for _, m := range imports.FindAllStringSubmatch(body, -1) {
			found++
			ref := m[1]
			if !strings.HasPrefix(ref, "./") {
				t.Errorf("%s imports %q: only relative ./ modules are served", name, ref)
				continue
			}
			target := path.Join(path.Dir(name), ref)
			if _, ok := files[target]; !ok {
				t.Errorf("%s imports %q, which is not embedded", name, ref)
			}
		}
	}
	if found < 6 {
		t.Errorf("found only %d imports; is the pattern broken?", found)
	}
	refs := regexp.MustCompile(`(?:src|href)="(/ui/[^"]+)"`).FindAllStringSubmatch(files["index.html"], -1)
	if len(refs) < 3 {
		t.Fatalf("index.html names %d /ui/ files, want app.js, app.css and the icon", len(refs))
	}
	for _, m := range refs {
		if rec := get(t, h, http.MethodGet, m[1], nil); rec.Code != http.StatusOK {
			t.Errorf("index.html names %s, which answers %d", m[1], rec.Code)
		}
	}
}

func TestContentType(t *testing.T) {
	for name, want := range map[string]string{
		"index.html":           "text/html; charset=utf-8",
		"app.js":               "text/javascript; charset=utf-8",
		"app.css":              "text/css; charset=utf-8",
		"favicon.svg":          "image/svg+xml",
		"icons/icon.png":       "image/png",
		"data.json":            "application/json",
		"site.webmanifest":     "application/manifest+json",
		"font.woff2":           "application/octet-stream",
		"no-extension":         "application/octet-stream",
		"assets/index.html.gz": "application/octet-stream",
	} {
		if got := contentType(name); got != want {
			t.Errorf("contentType(%q) = %q, want %q", name, got, want)
		}
	}
}
