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

var _ HeldAdmitter = (*Ollama)(nil)

// sharedPoll is how often a request waiting for a host that is full across the instances looks
// again: a place freed by another instance wakes nobody here.
var sharedPoll = 50 * time.Millisecond

// PreferredHost is the host a request admitted now would most likely go to (the least busy
// healthy one here), so that a caller counting its own limits in the HostCounter's store can
// take the host's shared place in the same round trip and hand it to AdmitHeld. "" when no host
// is free here.
func (o *Ollama) PreferredHost() string {
	var best *ollamaHost
	for _, h := range o.hosts {
		if !h.healthy.Load() && o.anyHealthy() {
			continue
		}
		if o.cfg.MaxInFlight > 0 && h.inFlight.Load() >= int64(o.cfg.MaxInFlight) {
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
func (o *Ollama) AdmitHeld(ctx context.Context, host string, release func()) (Admission, error) {
	if o.cfg.HostCounter == nil || o.cfg.MaxInFlight <= 0 {
		release()
		return o.Admit(ctx)
	}
	return o.sharedAdmitHeld(ctx, host, release)
}

// sharedAdmitHeld is Admit with a HostCounter: a place on a host that is free in this process
// (the local admission and its queue) and across the instances. While every host this process
// could use is full across the instances, the request waits, polling, within QueueTimeout, and
// at most QueueSize requests wait so; without a queue it fails at once. held, when not nil, gives
// back a shared place already taken on host, used if the local admission lands there.
func (o *Ollama) sharedAdmitHeld(ctx context.Context, host string, held func()) (Admission, error) {
	start := time.Now()
	var timer *time.Timer
	waiting := false
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if waiting {
			o.sharedWaiting.Add(-1)
		}
		if held != nil {
			held()
		}
	}()
	for {
		adm, err := o.admitLocal(ctx)
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
		if o.shareSlot(ctx, s) {
			s.waited = time.Since(start)
			return s, nil
		}
		if o.cfg.QueueSize <= 0 {
			return nil, o.noHost(true)
		}
		if !waiting {
			if o.sharedWaiting.Add(1) > int64(o.cfg.QueueSize) {
				o.sharedWaiting.Add(-1)
				return nil, &Error{Kind: KindOverloaded, RetryAfter: queueFullRetry,
					Err: fmt.Errorf("%w (%d waiting for a host that is full across the instances)", ErrQueueFull, o.cfg.QueueSize)}
			}
			waiting = true
			timer = time.NewTimer(o.cfg.QueueTimeout)
		}
		poll := time.NewTimer(sharedPoll)
		select {
		case <-poll.C:
		case <-timer.C:
			poll.Stop()
			return nil, &Error{Kind: KindOverloaded, RetryAfter: queueTimeoutRetry,
				Err: fmt.Errorf("%w (%s; every host is full across the instances)", ErrQueueTimeout, o.cfg.QueueTimeout)}
		case <-ctx.Done():
			poll.Stop()
			return nil, &Error{Kind: KindCanceled, Err: fmt.Errorf("waiting for an ollama host: %w", context.Cause(ctx))}
		}
	}
}

// shareSlot counts the local slot s in the HostCounter too. When its host is full across the
// instances it tries the other hosts (least busy here first); it moves s to the first with a
// shared place, or releases s and reports false.
func (o *Ollama) shareSlot(ctx context.Context, s *Slot) bool {
	if rel, ok := o.cfg.HostCounter.Take(ctx, s.h.name, o.cfg.MaxInFlight); ok {
		s.shared = rel
		return true
	}
	tried := make(triedSet, len(o.hosts))
	o.markTried(tried, s.h)
	next, rel := o.pickShared(ctx, tried, !o.anyHealthy())
	if next == nil {
		s.Release()
		return false
	}
	o.release(s.h)
	s.h, s.shared = next, rel
	return true
}

// pickShared is pick with a shared place on the host as well (with a HostCounter): hosts full
// across the instances are skipped. release gives the shared place back (a no-op without a
// HostCounter).
func (o *Ollama) pickShared(ctx context.Context, tried triedSet, allowDown bool) (h *ollamaHost, release func()) {
	if o.cfg.HostCounter == nil || o.cfg.MaxInFlight <= 0 {
		h, _ = o.pick(tried, allowDown)
		return h, func() {}
	}
	if tried == nil {
		tried = make(triedSet, len(o.hosts))
	}
	for {
		h, _ = o.pick(tried, allowDown)
		if h == nil {
			return nil, nil
		}
		if rel, ok := o.cfg.HostCounter.Take(ctx, h.name, o.cfg.MaxInFlight); ok {
			return h, rel
		}
		o.release(h)
		o.markTried(tried, h)
	}
}

// markTried marks h in tried.
func (o *Ollama) markTried(tried triedSet, h *ollamaHost) {
	for i, x := range o.hosts {
		if x == h {
			tried[i] = true
		}
	}
}
