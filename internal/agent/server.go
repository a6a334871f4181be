package agent

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tetherjobs/tether/internal/startstop"
)

// apiServer serves the API from Start to Stop.
type apiServer struct {
	srv      *http.Server
	addr     string
	stopping chan struct{} // closed at Stop: followed log streams end
	grace    time.Duration // http.shutdown_grace: what in-flight requests get at Stop
	log      *slog.Logger
	serve    *startstop.Loop // srv.Serve, which returns once Stop began
	stopOnce sync.Once
}

func newAPIServer(srv *http.Server, ln net.Listener, stopping chan struct{}, grace time.Duration, log *slog.Logger) *apiServer {
	return &apiServer{
		srv: srv, addr: ln.Addr().String(), stopping: stopping, grace: grace, log: log,
		serve: startstop.New("API server", func(context.Context) error { return srv.Serve(ln) }),
	}
}

// Addr is the address it listens on.
func (s *apiServer) Addr() string { return s.addr }

// Start serves the API until Stop.
func (s *apiServer) Start(ctx context.Context) error { return s.serve.Start(ctx) }

// Stop ends followed log streams, gives the other requests
// http.shutdown_grace to finish and waits for the server to return.
func (s *apiServer) Stop() {
	s.stopOnce.Do(func() {
		close(s.stopping)
		ctx, cancel := context.WithTimeout(context.Background(), s.grace)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			s.log.Warn("shutting down the API", "err", err)
		}
	})
	s.serve.Stop()
}

// Done is closed when the server returned, at Stop or when serving failed.
func (s *apiServer) Done() <-chan struct{} { return s.serve.Done() }

// Err is why the server returned, once Done is closed.
func (s *apiServer) Err() error { return s.serve.Wait() }
