package kubetest

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Fault makes the proxy answer matching requests with Status instead of
// passing them on, Count times.
type Fault struct {
	Method   string // "" matches any
	Contains string // substring of the path (and query); "" matches any
	Status   int
	Count    int
}

// Proxy is an HTTPS reverse proxy in front of the apiserver that
// authenticates as the admin, counts requests (by client, verb and
// resource: Requests) and injects faults. Clients
// reach it through Kubeconfig, or URL and CAData, with no credentials of
// their own. A bearer token a client does send (an EKS token, say) is
// recorded (BearerTokens) and removed. The apiserver never sees or checks it.
type Proxy struct {
	Kubeconfig string
	srv        *httptest.Server
	caPEM      []byte

	mu       sync.Mutex
	faults   []*Fault
	injected int
	creates  map[string]int // path of the collection → successful POSTs
	bearers  []string       // distinct bearer tokens, in order of arrival
	acct     accounting
}

// StartProxy starts a proxy for env and writes its kubeconfig into dir.
func StartProxy(env *Env, dir string) (*Proxy, error) {
	target, err := url.Parse(env.Config.Host)
	if err != nil {
		return nil, fmt.Errorf("proxy: parsing apiserver address: %w", err)
	}
	transport, err := rest.TransportFor(env.Config)
	if err != nil {
		return nil, fmt.Errorf("proxy: apiserver transport: %w", err)
	}
	p := &Proxy{creates: map[string]int{}}
	p.acct.reset(time.Now())
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
			// The proxy authenticates as the admin. A client's own
			// credentials would override (or confuse) that.
			r.Out.Header.Del("Authorization")
		},
		Transport:     transport,
		FlushInterval: -1, // watches stream
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// A client that went away (a watch ended, a test cancelled) is
			// not a proxy failure worth a line.
			if !errors.Is(err, context.Canceled) {
				log.Printf("kubetest proxy: %s %s: %v", r.Method, r.URL.Path, err)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request.Method == http.MethodPost && resp.StatusCode == http.StatusCreated {
				p.mu.Lock()
				p.creates[resp.Request.URL.Path]++
				p.mu.Unlock()
			}
			return nil
		},
	}
	p.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.recordBearer(r)
		done := p.account(r)
		defer done()
		if f := p.take(r); f != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(f.Status)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected fault","reason":%q,"code":%d}`,
				reason(f.Status), f.Status)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
	kc := clientcmdapi.NewConfig()
	kc.Clusters["proxy"] = &clientcmdapi.Cluster{Server: p.srv.URL, CertificateAuthorityData: p.caPEM}
	kc.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	kc.CurrentContext = "proxy"
	p.Kubeconfig = filepath.Join(dir, "proxy-kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p.Kubeconfig); err != nil {
		p.srv.Close()
		return nil, fmt.Errorf("proxy: writing kubeconfig: %w", err)
	}
	return p, nil
}

// Close stops the proxy.
func (p *Proxy) Close() { p.srv.Close() }

// URL is the proxy's https:// address.
func (p *Proxy) URL() string { return p.srv.URL }

// CAData is the PEM certificate clients must trust to reach the proxy (as a
// kubeconfig's certificate-authority-data before base64).
func (p *Proxy) CAData() []byte { return slices.Clone(p.caPEM) }

// BearerTokens are the distinct bearer tokens clients sent, in the order
// they first arrived.
func (p *Proxy) BearerTokens() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.bearers)
}

func (p *Proxy) recordBearer(r *http.Request) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.Contains(p.bearers, tok) {
		p.bearers = append(p.bearers, tok)
	}
}

// Inject adds a fault.
func (p *Proxy) Inject(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = append(p.faults, &f)
}

// Clear removes every fault still to be injected.
func (p *Proxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = nil
}

// Injected is how many requests were answered with a fault.
func (p *Proxy) Injected() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.injected
}

// Creates is how many POSTs to a collection path succeeded (201), e.g.
// "/apis/sparkoperator.k8s.io/v1beta2/namespaces/default/sparkapplications".
func (p *Proxy) Creates(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.creates[path]
}

func (p *Proxy) take(r *http.Request) *Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.faults {
		if f.Count > 0 && (f.Method == "" || f.Method == r.Method) && strings.Contains(r.URL.RequestURI(), f.Contains) {
			f.Count--
			p.injected++
			return f
		}
	}
	return nil
}

func reason(status int) string {
	switch status {
	case http.StatusTooManyRequests:
		return "TooManyRequests"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailable"
	case http.StatusGatewayTimeout:
		return "Timeout"
	case http.StatusUnauthorized:
		return "Unauthorized" // what the apiserver answers a bad or expired token
	case http.StatusForbidden:
		return "Forbidden" // RBAC, or an EKS access entry not yet propagated
	default:
		return "InternalError"
	}
}

// RequestKey is one kind of request the proxy counts. It says who sent it,
// what it does and to what.
type RequestKey struct {
	// Client is the request's User-Agent up to its first space, e.g.
	// "tether-plugin-sparkeks/0.2.0" (client-go's default is
	// "<binary>/<version> (<os>/<arch>) kubernetes/<commit>"). "" when the
	// client sent none.
	Client string
	// Verb is the apiserver's: GET (one object), LIST, WATCH (a GET with
	// watch=true or under /watch/), CREATE, UPDATE, PATCH, DELETE,
	// DELETECOLLECTION. It is the HTTP method for a non-resource path.
	Verb string
	// Resource is the resource, with its subresource after a slash
	// ("sparkapplications", "pods", "pods/log", "pods/status",
	// "pods/binding", "configmaps"). For a non-resource path ("/api",
	// "/apis", "/version", ...), the path itself.
	Resource string
}

// RequestStats is what the proxy counted since it started or was last
// reset (ResetRequests). Every request that reached the proxy counts, those
// answered with an injected fault too.
type RequestStats struct {
	Since  time.Time          // the start or the last reset
	Counts map[RequestKey]int // requests, by client, verb and resource
	// OpenWatches are the watches open now, by client. PeakWatches are the
	// most open at once since Since (a reset starts the peak from the
	// watches then open). "" is every client together.
	OpenWatches map[string]int
	PeakWatches map[string]int
	// OpenLogStreams and PeakLogStreams are the same for followed logs
	// (GET pods/log with follow=true), the other long-running request.
	OpenLogStreams map[string]int
	PeakLogStreams map[string]int
}

// Count is how many requests of client (every client when "") had verb on
// resource.
func (s RequestStats) Count(client, verb, resource string) int {
	n := 0
	for k, c := range s.Counts {
		if (client == "" || k.Client == client) && k.Verb == verb && k.Resource == resource {
			n += c
		}
	}
	return n
}

// Clients are the distinct clients seen, sorted.
func (s RequestStats) Clients() []string {
	seen := map[string]bool{}
	for k := range s.Counts {
		seen[k.Client] = true
	}
	out := make([]string, 0, len(seen))
	for c := range seen {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// Requests is a snapshot of the request accounting.
func (p *Proxy) Requests() RequestStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return RequestStats{
		Since:          p.acct.since,
		Counts:         cloneMap(p.acct.counts),
		OpenWatches:    cloneMap(p.acct.open[watchStream]),
		PeakWatches:    cloneMap(p.acct.peak[watchStream]),
		OpenLogStreams: cloneMap(p.acct.open[logStream]),
		PeakLogStreams: cloneMap(p.acct.peak[logStream]),
	}
}

// ResetRequests zeroes the counts and starts the watch peaks again from the
// watches open now. It returns the snapshot taken just before.
func (p *Proxy) ResetRequests() RequestStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := RequestStats{Since: p.acct.since, Counts: p.acct.counts,
		OpenWatches: cloneMap(p.acct.open[watchStream]), PeakWatches: p.acct.peak[watchStream],
		OpenLogStreams: cloneMap(p.acct.open[logStream]), PeakLogStreams: p.acct.peak[logStream]}
	p.acct.reset(time.Now())
	return s
}

type accounting struct {
	since  time.Time
	counts map[RequestKey]int
	open   [2]map[string]int // by stream kind, then client ("" is the sum)
	peak   [2]map[string]int
}

// The long-running requests the proxy keeps open counts of.
const (
	watchStream = iota
	logStream
)

func (a *accounting) reset(now time.Time) {
	a.since = now
	a.counts = map[RequestKey]int{}
	for i := range a.open {
		if a.open[i] == nil {
			a.open[i] = map[string]int{}
		}
		a.peak[i] = cloneMap(a.open[i])
	}
}

// account counts r and, for a watch or a followed log, holds it open until
// the returned func is called (when the proxy is done with it).
func (p *Proxy) account(r *http.Request) (done func()) {
	k := ClassifyRequest(r)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.acct.counts[k]++
	var kind int
	switch {
	case k.Verb == "WATCH":
		kind = watchStream
	case k.Verb == "GET" && k.Resource == "pods/log" && r.URL.Query().Get("follow") == "true":
		kind = logStream
	default:
		return func() {}
	}
	open, peak := p.acct.open[kind], p.acct.peak[kind]
	for _, c := range []string{k.Client, ""} {
		open[c]++
		peak[c] = max(peak[c], open[c])
	}
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range []string{k.Client, ""} {
			p.acct.open[kind][c]--
		}
	}
}

// ClassifyRequest is how the proxy counts r (see RequestKey).
func ClassifyRequest(r *http.Request) RequestKey {
	ua, _, _ := strings.Cut(r.Header.Get("User-Agent"), " ")
	k := RequestKey{Client: ua, Verb: r.Method}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// /api/v1/... or /apis/<group>/<version>/...
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	}
	watchPath := false
	if len(rest) > 0 && rest[0] == "watch" { // the deprecated /watch/ paths
		watchPath, rest = true, rest[1:]
	}
	// namespaces/<ns>/<resource>[/<name>[/<sub>]], unless it is a
	// namespace's own subresource (namespaces/<ns>/status, .../finalize).
	if len(rest) >= 3 && rest[0] == "namespaces" && !(len(rest) == 3 && (rest[2] == "status" || rest[2] == "finalize")) {
		rest = rest[2:]
	}
	if len(rest) == 0 || rest[0] == "" {
		k.Resource = "/" + strings.Join(parts, "/")
		return k
	}
	k.Resource = rest[0]
	named := len(rest) >= 2
	if len(rest) >= 3 {
		k.Resource += "/" + rest[2]
	}
	q := r.URL.Query()
	watch := watchPath || q.Get("watch") == "true" || q.Get("watch") == "1"
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		switch {
		case watch:
			k.Verb = "WATCH"
		case named:
			k.Verb = "GET"
		default:
			k.Verb = "LIST"
		}
	case http.MethodPost:
		k.Verb = "CREATE"
	case http.MethodPut:
		k.Verb = "UPDATE"
	case http.MethodPatch:
		k.Verb = "PATCH"
	case http.MethodDelete:
		if named {
			k.Verb = "DELETE"
		} else {
			k.Verb = "DELETECOLLECTION"
		}
	}
	return k
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
