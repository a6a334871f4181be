// Package ui is tether's web console: static assets embedded in the binary,
// served by every agent at / beside the API they call. The assets carry no
// data (everything comes from /api/v1 under the API's auth), so they are
// served without a token. docs/ui.md describes the console.
package ui

import (
	"cmp"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
)

//go:embed assets
var assets embed.FS

// ContentSecurityPolicy is sent with every answer: scripts, styles and
// connections only from the agent itself, no inline script or style, no
// framing.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"img-src 'self' data:; connect-src 'self'; font-src 'self'; manifest-src 'self'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// contentTypes are set explicitly rather than guessed from the system's MIME
// tables, which may lack .js or map it to a type browsers refuse for modules.
var contentTypes = map[string]string{
	".html":        "text/html; charset=utf-8",
	".js":          "text/javascript; charset=utf-8",
	".css":         "text/css; charset=utf-8",
	".svg":         "image/svg+xml",
	".png":         "image/png",
	".json":        "application/json",
	".webmanifest": "application/manifest+json",
}

func contentType(name string) string {
	return cmp.Or(contentTypes[path.Ext(name)], "application/octet-stream")
}

type file struct {
	body        []byte
	etag        string
	contentType string
}

type handler struct {
	// files by URL path: "/ui/" and the path under assets/ (e.g.
	// "/ui/app.js"), and "/" for index.html.
	files map[string]file
}

// Handler serves the console. GET / answers assets/index.html and
// GET /ui/<file> answers assets/<file>. Anything else is a JSON 404.
func Handler() http.Handler {
	files, err := load(assets, "assets")
	if err != nil {
		// The files are compiled in. Failing to read them is a broken build.
		panic(fmt.Sprintf("ui: reading embedded assets: %v", err))
	}
	files["/"] = files["/ui/index.html"]
	return &handler{files: files}
}

// load reads every file under dir of fsys once, with its ETag, by URL path
// (/ui/ and its path under dir).
func load(fsys fs.FS, dir string) (map[string]file, error) {
	files := make(map[string]file)
	err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(fsys, p)
		if err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		sum := sha256.Sum256(body)
		files["/ui/"+strings.TrimPrefix(p, dir+"/")] = file{
			body:        body,
			etag:        `"` + hex.EncodeToString(sum[:16]) + `"`,
			contentType: contentType(p),
		}
		return nil
	})
	return files, err
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", ContentSecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Cache-Control", "no-cache")

	f, ok := h.files[r.URL.Path]
	if !ok {
		notFound(w, r.URL.Path)
		return
	}
	hdr.Set("ETag", f.etag)
	hdr.Set("Content-Type", f.contentType)
	if etagMatches(r.Header.Get("If-None-Match"), f.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hdr.Set("Content-Length", strconv.Itoa(len(f.body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(f.body) // the client went away; nothing to do
	}
}

// etagMatches reports whether an If-None-Match header names etag (weak
// comparison, as RFC 9110 asks for If-None-Match).
func etagMatches(header, etag string) bool {
	for _, tag := range strings.Split(header, ",") {
		tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/")
		if tag == etag || tag == "*" {
			return true
		}
	}
	return false
}

// notFound answers the API's error shape, so a client sees one format.
func notFound(w http.ResponseWriter, p string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_ = json.NewEncoder(w).Encode(map[string]string{
		"error": fmt.Sprintf("no console file at %s; the console is at /", p),
		"code":  "not_found",
	})
}
