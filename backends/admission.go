package backends

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Admission control. Ollama queues requests it cannot run at once and answers 503 only when its
// own queue (OLLAMA_MAX_QUEUE, 512 by default) is full, so a busy server shows no back-pressure
// until every client has waited for minutes. The backend therefore caps the requests it sends to
// each host (MaxInFlight) and keeps its own bounded, first-come-first-served queue in front of
// the hosts (QueueSize, QueueTimeout). A caller that must not start expensive work for a request
// that will be refused (the HTTP layer reserves a credit) admits it first with Admit (the
// Admitter interface) and passes the admission to Generate in Request.Admission.

// Errors of an admission that failed (wrapped in an *Error of KindOverloaded).
var (
	// ErrQueueFull: every host is at MaxInFlight and QueueSize requests are already waiting.
	ErrQueueFull = errors.New("every model server host is busy and the admission queue is full")
	// ErrQueueTimeout: the request waited QueueTimeout in the admission queue without a free host.
	ErrQueueTimeout = errors.New("no model server host became free within the queue timeout")
)

// Retry hints of a refused admission.
const (
	queueFullRetry    = 2 * time.Second
	queueTimeoutRetry = 5 * time.Second
)

// Slot is a place on one host, taken by Admit: the Chat backend's Admission. Pass it in
// Request.Admission: Generate then starts on that host and gives the slot back when it ends. A
// slot that is not passed to Generate must be released with Release. Release may be called more
// than once.
type Slot struct {
	chat     *Chat
	h        *chatHost
	released atomic.Bool
	waited   time.Duration
	shared   func() // gives back the place counted by the HostCounter; nil: none
}

// Waited is how long the request waited in the admission queue (0: it was not queued).
func (s *Slot) Waited() time.Duration { return s.waited }

// Release gives the slot back, waking the first queued request. Safe on a nil or released slot.
func (s *Slot) Release() {
	if s == nil || !s.released.CompareAndSwap(false, true) {
		return
	}
	s.chat.release(s.h)
	if s.shared != nil {
		s.shared()
	}
}

// waiter is one request in the admission queue. ch receives one value when a slot was freed for
// it (a hand-off); it then picks a host itself.
type waiter struct{ ch chan struct{} }

// admission is the queue state of a Chat backend.
type admission struct {
	// waiting counts the requests inside Admit's queue path. It is raised before the request
	// looks for a host, and release reads it after lowering a host's count: either the release
	// sees the request and wakes it, or the request sees the freed place. No wake-up is lost.
	waiting atomic.Int64

	mu    sync.Mutex
	queue []*waiter // FIFO
	// handoffs counts queued requests that were woken but have not taken their host yet: a
	// newcomer must queue behind them instead of taking the place that was freed for them.
	handoffs int
}

// Admit waits for a free place on a host: at once when one is free; else, with QueueSize > 0,
// in a first-come-first-served queue for at most QueueTimeout. It fails with an *Error of
// KindOverloaded (ErrQueueFull, ErrQueueTimeout, or every host at MaxInFlight without a queue),
// KindUnavailable (no healthy host) or KindCanceled (ctx ended while waiting). With a
// HostCounter the place must also be free across the instances that share it (sharedAdmit).
func (c *Chat) Admit(ctx context.Context) (Admission, error) {
	if c.cfg.HostCounter != nil && c.cfg.MaxInFlight > 0 {
		return c.sharedAdmitHeld(ctx, "", nil)
	}
	return c.admitLocal(ctx)
}

// admitLocal is Admit within this process.
func (c *Chat) admitLocal(ctx context.Context) (Admission, error) {
	allowDown := !c.anyHealthy()
	if c.cfg.MaxInFlight == 0 || c.cfg.QueueSize <= 0 {
		h, full := c.pick(nil, allowDown)
		if h == nil {
			return nil, c.noHost(full)
		}
		return &Slot{chat: c, h: h}, nil
	}

	a := &c.adm
	a.waiting.Add(1)
	defer a.waiting.Add(-1)
	a.mu.Lock()
	if len(a.queue) == 0 && a.handoffs == 0 {
		h, full := c.pick(nil, allowDown)
		if h != nil || !full {
			a.mu.Unlock()
			if h == nil {
				return nil, c.noHost(false)
			}
			return &Slot{chat: c, h: h}, nil
		}
	}
	if len(a.queue) >= c.cfg.QueueSize {
		a.mu.Unlock()
		return nil, &Error{Kind: KindOverloaded, RetryAfter: queueFullRetry,
			Err: fmt.Errorf("%w (%d waiting)", ErrQueueFull, c.cfg.QueueSize)}
	}
	w := &waiter{ch: make(chan struct{}, 1)}
	a.queue = append(a.queue, w)
	a.mu.Unlock()

	start := time.Now()
	timer := time.NewTimer(c.cfg.QueueTimeout)
	defer timer.Stop()
	for {
		select {
		case <-w.ch:
			a.mu.Lock()
			a.handoffs--
			h, full := c.pick(nil, !c.anyHealthy())
			if h != nil || !full {
				a.mu.Unlock()
				if h == nil {
					return nil, c.noHost(false)
				}
				return &Slot{chat: c, h: h, waited: time.Since(start)}, nil
			}
			// The place went to a failover attempt of a running request: wait again, first in line.
			a.queue = append([]*waiter{w}, a.queue...)
			a.mu.Unlock()
		case <-timer.C:
			c.leave(w)
			return nil, &Error{Kind: KindOverloaded, RetryAfter: queueTimeoutRetry,
				Err: fmt.Errorf("%w (%s)", ErrQueueTimeout, c.cfg.QueueTimeout)}
		case <-ctx.Done():
			c.leave(w)
			return nil, &Error{Kind: KindCanceled, Err: fmt.Errorf("waiting for a model server host: %w", context.Cause(ctx))}
		}
	}
}

// noHost is the error when pick found no host: all at their cap (full) or none healthy.
func (c *Chat) noHost(full bool) error {
	if full {
		return &Error{Kind: KindOverloaded, RetryAfter: time.Second,
			Err: fmt.Errorf("every model server host has max_in_flight (%d) requests running", c.cfg.MaxInFlight)}
	}
	return &Error{Kind: KindUnavailable, RetryAfter: c.cfg.HealthInterval, Err: errors.New("no healthy model server host")}
}

// leave takes a waiter that gives up out of the queue. If a place had already been handed to it,
// the place goes to the next in line.
func (c *Chat) leave(w *waiter) {
	a := &c.adm
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, x := range a.queue {
		if x == w {
			a.queue = append(a.queue[:i], a.queue[i+1:]...)
			return
		}
	}
	// Not queued: it was woken (its channel holds the hand-off) while it gave up.
	a.handoffs--
	c.wakeLocked()
}

// wakeLocked hands the turn to the first queued request. Called with adm.mu held.
func (c *Chat) wakeLocked() {
	a := &c.adm
	if len(a.queue) == 0 {
		return
	}
	w := a.queue[0]
	a.queue[0] = nil
	a.queue = a.queue[1:]
	a.handoffs++
	w.ch <- struct{}{}
}

// release frees a place on h and wakes the first queued request.
func (c *Chat) release(h *chatHost) {
	h.inFlight.Add(-1)
	if c.adm.waiting.Load() > 0 {
		c.adm.mu.Lock()
		c.wakeLocked()
		c.adm.mu.Unlock()
	}
}

// QueueLen is the number of requests waiting in the admission queue.
func (c *Chat) QueueLen() int {
	c.adm.mu.Lock()
	defer c.adm.mu.Unlock()
	return len(c.adm.queue)
}
