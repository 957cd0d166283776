package backends

import (
	"context"
	"fmt"
	"time"
)

// HostCounter counts the requests that every instance sharing it runs on each host (Redis, in
// caddy-textgen), so that MaxInFlight holds for a host that several instances send to. Take takes
// one of max places of host (its URL), or reports false when all are taken; release gives it
// back. An implementation that cannot reach its store counts in this process instead: Take never
// fails otherwise. String names the store, for pooling backends by configuration.
type HostCounter interface {
	Take(ctx context.Context, host string, max int) (release func(), ok bool)
	String() string
}

// HeldAdmitter is an Admitter whose hosts are counted in a HostCounter: a caller that counts
// its own limits in the same store takes the place on PreferredHost with them (one round trip)
// and hands it over with AdmitHeld.
type HeldAdmitter interface {
	Admitter
	PreferredHost() string
	AdmitHeld(ctx context.Context, host string, release func()) (Admission, error)
}

var _ HeldAdmitter = (*Chat)(nil)

// sharedPoll is how often a request waiting for a host that is full across the instances looks
// again: a place freed by another instance wakes nobody here.
var sharedPoll = 50 * time.Millisecond

// PreferredHost is the host a request admitted now would most likely go to (the least busy
// healthy one here), so that a caller counting its own limits in the HostCounter's store can
// take the host's shared place in the same round trip and hand it to AdmitHeld. "" when no host
// is free here.
func (c *Chat) PreferredHost() string {
	var best *chatHost
	for _, h := range c.hosts {
		if !h.healthy.Load() && c.anyHealthy() {
			continue
		}
		if c.cfg.MaxInFlight > 0 && h.inFlight.Load() >= int64(c.cfg.MaxInFlight) {
			continue
		}
		if best == nil || h.inFlight.Load() < best.inFlight.Load() {
			best = h
		}
	}
	if best == nil {
		return ""
	}
	return best.name
}

// AdmitHeld is Admit for a caller that already took a shared place on host (PreferredHost) in
// the HostCounter, with release to give it back: the place is used when the local admission
// lands on that host, else given back (and the host's place taken as Admit would). The
// Admission owns release from then on, whatever the outcome.
func (c *Chat) AdmitHeld(ctx context.Context, host string, release func()) (Admission, error) {
	if c.cfg.HostCounter == nil || c.cfg.MaxInFlight <= 0 {
		release()
		return c.Admit(ctx)
	}
	return c.sharedAdmitHeld(ctx, host, release)
}

// sharedAdmitHeld is Admit with a HostCounter: a place on a host that is free in this process
// (the local admission and its queue) and across the instances. While every host this process
// could use is full across the instances, the request waits, polling, within QueueTimeout, and
// at most QueueSize requests wait so; without a queue it fails at once. held, when not nil, gives
// back a shared place already taken on host, used if the local admission lands there.
func (c *Chat) sharedAdmitHeld(ctx context.Context, host string, held func()) (Admission, error) {
	start := time.Now()
	var timer *time.Timer
	waiting := false
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if waiting {
			c.sharedWaiting.Add(-1)
		}
		if held != nil {
			held()
		}
	}()
	for {
		adm, err := c.admitLocal(ctx)
		if err != nil {
			return nil, err
		}
		s := adm.(*Slot)
		if held != nil && s.h.name == host {
			s.shared, held = held, nil
			s.waited = time.Since(start)
			return s, nil
		}
		if held != nil {
			held()
			held = nil
		}
		if c.shareSlot(ctx, s) {
			s.waited = time.Since(start)
			return s, nil
		}
		if c.cfg.QueueSize <= 0 {
			return nil, c.noHost(true)
		}
		if !waiting {
			if c.sharedWaiting.Add(1) > int64(c.cfg.QueueSize) {
				c.sharedWaiting.Add(-1)
				return nil, &Error{Kind: KindOverloaded, RetryAfter: queueFullRetry,
					Err: fmt.Errorf("%w (%d waiting for a host that is full across the instances)", ErrQueueFull, c.cfg.QueueSize)}
			}
			waiting = true
			timer = time.NewTimer(c.cfg.QueueTimeout)
		}
		poll := time.NewTimer(sharedPoll)
		select {
		case <-poll.C:
		case <-timer.C:
			poll.Stop()
			return nil, &Error{Kind: KindOverloaded, RetryAfter: queueTimeoutRetry,
				Err: fmt.Errorf("%w (%s; every host is full across the instances)", ErrQueueTimeout, c.cfg.QueueTimeout)}
		case <-ctx.Done():
			poll.Stop()
			return nil, &Error{Kind: KindCanceled, Err: fmt.Errorf("waiting for a model server host: %w", context.Cause(ctx))}
		}
	}
}

// shareSlot counts the local slot s in the HostCounter too. When its host is full across the
// instances it tries the other hosts (least busy here first); it moves s to the first with a
// shared place, or releases s and reports false.
func (c *Chat) shareSlot(ctx context.Context, s *Slot) bool {
	if rel, ok := c.cfg.HostCounter.Take(ctx, s.h.name, c.cfg.MaxInFlight); ok {
		s.shared = rel
		return true
	}
	tried := make(triedSet, len(c.hosts))
	c.markTried(tried, s.h)
	next, rel := c.pickShared(ctx, tried, !c.anyHealthy())
	if next == nil {
		s.Release()
		return false
	}
	c.release(s.h)
	s.h, s.shared = next, rel
	return true
}

// pickShared is pick with a shared place on the host as well (with a HostCounter): hosts full
// across the instances are skipped. release gives the shared place back (a no-op without a
// HostCounter).
func (c *Chat) pickShared(ctx context.Context, tried triedSet, allowDown bool) (h *chatHost, release func()) {
	if c.cfg.HostCounter == nil || c.cfg.MaxInFlight <= 0 {
		h, _ = c.pick(tried, allowDown)
		return h, func() {}
	}
	if tried == nil {
		tried = make(triedSet, len(c.hosts))
	}
	for {
		h, _ = c.pick(tried, allowDown)
		if h == nil {
			return nil, nil
		}
		if rel, ok := c.cfg.HostCounter.Take(ctx, h.name, c.cfg.MaxInFlight); ok {
			return h, rel
		}
		c.release(h)
		c.markTried(tried, h)
	}
}

// markTried marks h in tried.
func (c *Chat) markTried(tried triedSet, h *chatHost) {
	for i, x := range c.hosts {
		if x == h {
			tried[i] = true
		}
	}
}
