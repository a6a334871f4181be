package kubetest

import (
	"context"
	"errors"
	"log/slog"
)

// Stack is what a test of tether's Kubernetes side runs against: the control
// plane, the proxy clients reach it through, and the simulator already
// running. Stop ends all three.
type Stack struct {
	Env   *Env
	Proxy *Proxy
	Sim   *Simulator

	cancel  context.CancelFunc
	simDone chan struct{}
}

// StartStack starts a Stack whose files live under dir. Whatever started is
// stopped again when it fails.
func StartStack(ctx context.Context, dir string, log *slog.Logger) (*Stack, error) {
	env, err := Start(ctx, dir)
	if err != nil {
		return nil, err
	}
	proxy, err := StartProxy(env, dir)
	if err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	simCtx, cancel := context.WithCancel(context.Background())
	s := &Stack{Env: env, Proxy: proxy, Sim: NewSimulator(env, log), cancel: cancel, simDone: make(chan struct{})}
	go func() {
		defer close(s.simDone)
		if err := s.Sim.Run(simCtx); err != nil {
			log.Error("kubetest simulator stopped", "err", err)
		}
	}()
	return s, nil
}

// Stop stops the simulator, the proxy and the control plane.
func (s *Stack) Stop() error {
	if s == nil {
		return nil
	}
	s.cancel()
	<-s.simDone
	s.Proxy.Close()
	return s.Env.Stop()
}
