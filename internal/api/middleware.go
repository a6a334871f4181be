package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
	"time"

	wire "github.com/tetherjobs/tether/pkg/api"
)

// requestInfo is filled in by inner handlers for the request log.
type requestInfo struct {
	principal string
}

type requestInfoKey struct{}

type principalKey struct{}

// principal returns the name of the token that authenticated the request, or
// "" when auth is off.
func principal(ctx context.Context) string {
	name, _ := ctx.Value(principalKey{}).(string)
	return name
}

// authenticate requires a known bearer token when tokens are configured.
func (s *server) authenticate(h http.HandlerFunc) http.Handler {
	if len(s.opts.Tokens) == 0 {
		return h
	}
	// Compare digests so the comparison takes the same time whatever the
	// length of the presented token.
	type entry struct {
		name   string
		digest [32]byte
	}
	entries := make([]entry, len(s.opts.Tokens))
	for i, t := range s.opts.Tokens {
		entries[i] = entry{name: t.Name, digest: sha256.Sum256([]byte(t.Token))}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header := r.Header.Get("Authorization")
		scheme, token, _ := strings.Cut(header, " ")
		if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" { // an absent header has no scheme
			w.Header().Set("WWW-Authenticate", `Bearer realm="tether"`)
			writeError(w, http.StatusUnauthorized, wire.CodeUnauthorized, "",
				"missing bearer token: send the header \"Authorization: Bearer <token>\" (tether CLI: --token or TETHER_TOKEN)")
			return
		}
		got := sha256.Sum256([]byte(strings.TrimSpace(token)))
		name, found := "", 0
		for _, e := range entries {
			if subtle.ConstantTimeCompare(got[:], e.digest[:]) == 1 {
				name, found = e.name, 1
			}
		}
		if found == 0 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tether", error="invalid_token"`)
			writeError(w, http.StatusUnauthorized, wire.CodeUnauthorized, "", "invalid bearer token")
			return
		}
		if info, ok := r.Context().Value(requestInfoKey{}).(*requestInfo); ok {
			info.principal = name
		}
		h(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, name)))
	})
}

// statusRecorder remembers the status and size of an answer for the request
// log. Unwrap lets http.ResponseController reach Flush and deadlines.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

// WriteHeader keeps the first status sent. It is the answer's.
func (r *statusRecorder) WriteHeader(code int) {
	r.status = cmp.Or(r.status, code)
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.status = cmp.Or(r.status, http.StatusOK) // a write without a status sends 200
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// probePaths are logged at debug: probes come every few seconds.
var probePaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &requestInfo{}
		rec := &statusRecorder{ResponseWriter: w}
		inner := r.WithContext(context.WithValue(r.Context(), requestInfoKey{}, info))
		next.ServeHTTP(rec, inner)
		// The mux sets Pattern on the request it is handed: inner, as the
		// middlewares between pass it on unchanged. Empty: no route
		// matched, or refused before routing. Never the raw path, which
		// would make a series per job ID.
		route := inner.Pattern
		if s.opts.RequestMetrics != nil {
			// Nothing written: net/http answers 200.
			s.opts.RequestMetrics.ObserveHTTP(route, cmp.Or(rec.status, http.StatusOK), time.Since(start))
		}
		level := slog.LevelInfo
		switch {
		case rec.status >= 500 && r.Context().Err() == nil:
			// A 500 whose client went away mid-request (a follower
			// stopped polling) is a cancelled query, not a failure: it is
			// logged as any other request below.
			level = slog.LevelError
		case probePaths[r.URL.Path]:
			level = slog.LevelDebug // probes every few seconds would drown the log
		case s.opts.QuietRequests:
			level = slog.LevelDebug
		}
		attrs := []slog.Attr{
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", rec.status),
			slog.Int64("bytes", rec.bytes),
			slog.Duration("duration", time.Since(start)),
			slog.String("remote", r.RemoteAddr),
			slog.String("route", route),
		}
		if info.principal != "" {
			attrs = append(attrs, slog.String("principal", info.principal))
		}
		s.log.LogAttrs(r.Context(), level, "http request", attrs...)
	})
}
