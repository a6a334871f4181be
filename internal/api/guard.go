package api

import (
	"cmp"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	wire "github.com/tetherjobs/tether/pkg/api"
)

// Cross-site and DNS-rebinding defences. A web page the operator opens can
// make the browser send requests to the agent (often on 127.0.0.1 with auth
// off): a form POST with text/plain, form-urlencoded or multipart bodies
// needs no CORS preflight, and a page on a name rebound to the agent's
// address sends its own Host. So state-changing routes require
// Content-Type: application/json (which a cross-site page cannot send
// without a preflight, and no CORS headers are ever answered), an Origin,
// when present, must be the agent itself, and the Host must be one the agent
// answers to.

// hostPolicy decides which Host headers the API answers.
type hostPolicy struct {
	any     bool     // every Host: "*" is allowed, or tokens with no list
	names   []string // lower-case names matching any port
	exact   []string // lower-case name:port pairs
	listens string   // the listen address's host when it is a name
}

func newHostPolicy(allowed []string, listenAddr string, tokens bool) hostPolicy {
	p := hostPolicy{any: len(allowed) == 0 && tokens}
	for _, a := range allowed {
		a = strings.ToLower(strings.TrimSpace(a))
		switch {
		case a == "*":
			p.any = true
		case a == "":
		case hasPort(a):
			p.exact = append(p.exact, a)
		default:
			p.names = append(p.names, strings.Trim(a, "[]"))
		}
	}
	// A malformed address or an empty host gives "", which names nothing.
	host, _, _ := net.SplitHostPort(listenAddr)
	if _, err := netip.ParseAddr(host); err != nil {
		p.listens = strings.ToLower(host)
	}
	return p
}

// hasPort reports whether a host[:port] value ends in a port.
func hasPort(hostport string) bool {
	_, port, err := net.SplitHostPort(hostport)
	return err == nil && port != ""
}

// splitHost returns a Host header's host (lower case, without brackets and
// a trailing dot) and whether it is an IP literal.
func splitHost(hostport string) (host string, ip bool) {
	host = hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	_, err := netip.ParseAddr(host)
	return host, err == nil
}

// allowedHost reports whether the API answers a request with this Host.
func (p hostPolicy) allowedHost(hostport string) bool {
	if p.any || hostport == "" { // no browser sends an empty Host (HTTP/1.0)
		return true
	}
	host, ip := splitHost(hostport)
	if ip || host == "localhost" || strings.HasSuffix(host, ".localhost") || (p.listens != "" && host == p.listens) {
		return true
	}
	return p.listed(hostport)
}

// listed reports whether hostport matches an http.allowed_hosts entry.
func (p hostPolicy) listed(hostport string) bool {
	if p.any {
		return true
	}
	host, _ := splitHost(hostport)
	return slices.Contains(p.names, host) || slices.Contains(p.exact, strings.ToLower(hostport))
}

// checkHost answers 421 to a request whose Host the agent does not answer
// to. Probes are checked too. Load balancers send an IP literal, which
// passes.
func (s *server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hosts.allowedHost(r.Host) {
			writeError(w, http.StatusMisdirectedRequest, wire.CodeForbiddenHost, "Host", fmt.Sprintf(
				"this agent does not answer to Host %q: add it to http.allowed_hosts (env TETHER_HTTP_ALLOWED_HOSTS), or use the agent's IP address or localhost", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// stateChanging guards a route that changes state. A foreign or null Origin
// is refused (403), and the body must be declared JSON (415), even when it
// is empty.
func (s *server) stateChanging(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" && !s.sameOrigin(origin, r.Host) {
			writeError(w, http.StatusForbidden, wire.CodeForbiddenOrigin, "Origin", fmt.Sprintf(
				"cross-site request refused: Origin %q is not this agent (%s); the API takes no requests from web pages of other sites (add the page's host to http.allowed_hosts to allow it)", origin, r.Host))
			return
		}
		if why := jsonContentType(r.Header.Values("Content-Type")); why != "" {
			writeError(w, http.StatusUnsupportedMediaType, wire.CodeUnsupportedMediaType, "Content-Type",
				why+`; send "Content-Type: application/json" (with a JSON body; an empty body is allowed only for cancel)`)
			return
		}
		h(w, r)
	}
}

// sameOrigin reports whether an Origin header is the agent itself (same
// host:port as the Host header) or a host http.allowed_hosts lists.
func (s *server) sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || !slices.Contains([]string{"http", "https"}, u.Scheme) || u.Host == "" ||
		u.User != nil || !slices.Contains([]string{"", "/"}, u.Path) || u.RawQuery != "" {
		return false // "null" (sandboxed frames, file: pages) included
	}
	return strings.EqualFold(u.Host, host) || s.hosts.listed(u.Host)
}

// jsonContentType says what is wrong with a request's Content-Type, or "".
func jsonContentType(values []string) string {
	switch len(values) {
	case 0:
		return "Content-Type is missing"
	case 1:
	default:
		return "Content-Type is given more than once"
	}
	mt, params, err := mime.ParseMediaType(values[0])
	if err != nil {
		return fmt.Sprintf("Content-Type %q is malformed", values[0])
	}
	if mt != "application/json" {
		return fmt.Sprintf("Content-Type %q is not application/json", mt)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return fmt.Sprintf("charset %q is not utf-8 (JSON is UTF-8)", cs)
	}
	return ""
}

// jsonRouteErrors answers the mux's own 404 (no route) and 405 (route
// without that method; Allow kept) in the JSON error shape instead of
// text/plain. Registered routes and the mux's redirects pass through.
func jsonRouteErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// No pattern. It is the mux's not-found or method-not-allowed
		// handler, or a redirect to the cleaned path. Find out which without
		// letting it write.
		probe := &statusProbe{header: http.Header{}}
		h.ServeHTTP(probe, r)
		switch probe.status {
		case http.StatusNotFound:
			writeError(w, http.StatusNotFound, wire.CodeNotFound, "",
				fmt.Sprintf("no such route: %s %s (docs/api.md lists the routes)", r.Method, r.URL.EscapedPath()))
		case http.StatusMethodNotAllowed:
			allow := probe.header.Get("Allow")
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "",
				fmt.Sprintf("method %s is not allowed on %s; allowed: %s", r.Method, r.URL.EscapedPath(), allow))
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// statusProbe records the status and headers a handler answers and drops
// its body.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header { return p.header }

func (p *statusProbe) WriteHeader(code int) {
	p.status = cmp.Or(p.status, code) // the first one counts
}

func (p *statusProbe) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return len(b), nil
}
