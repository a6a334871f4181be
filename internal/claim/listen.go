package claim

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherjobs/tether/internal/store"
)

// listenLoop wakes the claim loop when a job of ours is submitted and the
// heartbeat when one of our jobs is canceled, and feeds Config.Follow (the
// API's followers) on the same connection. Notifications only speed things
// up. Polling and heartbeats work without them, so errors just reconnect.
func (s *Service) listenLoop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("listening for notifications; reconnecting", "err", err, "in", backoff)
		if !sleepCtx(ctx, backoff) {
			return
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func (s *Service) listen(ctx context.Context) error {
	pc, err := s.listenConn(ctx)
	if err != nil {
		return err
	}
	defer pc.Close(context.WithoutCancel(ctx))
	if err := store.Listen(ctx, pc, s.cfg.Follow != nil); err != nil {
		return err
	}
	// Followers poll while we are not live. A nil Hub ignores both calls.
	s.cfg.Follow.SetLive(true)
	defer s.cfg.Follow.SetLive(false)
	kick(s.wake) // anything submitted while we were not listening
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		s.notified(n.Channel, n.Payload)
	}
}

// notified acts on one notification.
func (s *Service) notified(channel, payload string) {
	switch channel {
	case store.NotifyChannel:
		if slices.Contains(s.commands, payload) {
			kick(s.wake)
		}
	case store.CancelChannel:
		if s.holdsJob(payload) {
			kick(s.beat)
		}
	default:
		s.cfg.Follow.Deliver(channel, payload)
	}
}

// holdsJob reports whether this agent runs job id, under any lease.
func (s *Service) holdsJob(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.jobs {
		if k.ID == id {
			return true
		}
	}
	return false
}

// listenConn opens the session LISTEN runs on: Config.ListenConnect's, else
// one out of the pool, which never goes back since it carries LISTEN state.
func (s *Service) listenConn(ctx context.Context) (*pgx.Conn, error) {
	if s.cfg.ListenConnect != nil {
		return s.cfg.ListenConnect(ctx)
	}
	conn, err := s.store.Pool().Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return conn.Hijack(), nil
}
