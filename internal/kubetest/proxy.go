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
// authenticates as the admin, counts requests and injects faults. Clients
// reach it through Kubeconfig, or URL and CAData, with no credentials of
// their own. A bearer token a client does send (an EKS token, say) is
// recorded (BearerTokens) and removed: the apiserver never sees or checks it.
type Proxy struct {
	Kubeconfig string
	srv        *httptest.Server
	caPEM      []byte

	mu       sync.Mutex
	faults   []*Fault
	injected int
	creates  map[string]int // path of the collection → successful POSTs
	bearers  []string       // distinct bearer tokens, in order of arrival
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
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
			// The proxy authenticates as the admin; a client's own
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
