// Package inflight keeps a Caddy module's shared resources (a pooled ledger, a backend) alive
// until the last request that uses them has ended.
//
// Caddy cleans up the old config of a reload while its requests may still be streaming, so a
// module must not give its pooled resources back in Cleanup while requests run: Guard releases
// them at once when none runs, else when the last one ends.
package inflight

import (
	"sync"

	"go.uber.org/zap"
)

// Guard counts the running requests of one module instance.
type Guard struct {
	mu       sync.Mutex
	running  int
	closing  bool // Cleanup was called: no new request gets in
	released bool
	release  func() error
	log      *zap.Logger
}

// New returns a Guard that calls release once, when the module is cleaned up and no request
// runs any more.
func New(release func() error, log *zap.Logger) *Guard {
	return &Guard{release: release, log: log}
}

// Enter marks a request as running. It returns false, at once, when the module was cleaned up
// (a request that reached a config after it was replaced): the caller must refuse the request
// and must not call Exit.
func (g *Guard) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return false
	}
	g.running++
	return true
}

// Exit marks the end of a request that Enter let in; the last one out after Cleanup releases.
func (g *Guard) Exit() {
	if g.leave(-1) {
		if err := g.release(); err != nil && g.log != nil {
			g.log.Error("releasing shared resources after the last request", zap.Error(err))
		}
	}
}

// Cleanup releases the resources now if no request runs, else when the last one ends. It is
// safe on a nil Guard (a Provision that failed before creating it) and when called twice.
func (g *Guard) Cleanup() error {
	if g == nil {
		return nil
	}
	if g.leave(0) {
		return g.release()
	}
	return nil
}

// leave applies delta to the running count, marks the Guard closing when delta is 0 (Cleanup),
// and reports whether the caller must release now: closing, nothing running, not yet released.
func (g *Guard) leave(delta int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running += delta
	if delta == 0 {
		g.closing = true
	}
	if g.closing && g.running == 0 && !g.released {
		g.released = true
		return true
	}
	return false
}
