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
	mu       sync.RWMutex
	released bool
	release  func() error
	log      *zap.Logger
}

// New returns a Guard that calls release once, when the module is cleaned up and no request
// runs any more.
func New(release func() error, log *zap.Logger) *Guard {
	return &Guard{release: release, log: log}
}

// Enter marks a request as running. It returns false when the resources were released already
// (a request that reached a config after it was replaced): the caller must refuse the request
// and must not call Exit.
func (g *Guard) Enter() bool {
	g.mu.RLock()
	if g.released {
		g.mu.RUnlock()
		return false
	}
	return true
}

// Exit marks the end of a request that Enter let in.
func (g *Guard) Exit() { g.mu.RUnlock() }

// Cleanup releases the resources now if no request runs, else in the background after the last
// one ends. It is safe on a nil Guard (a Provision that failed before creating it) and when
// called twice.
func (g *Guard) Cleanup() error {
	if g == nil {
		return nil
	}
	if g.mu.TryLock() {
		return g.releaseLocked()
	}
	go func() {
		g.mu.Lock()
		if err := g.releaseLocked(); err != nil && g.log != nil {
			g.log.Error("releasing shared resources after the last request", zap.Error(err))
		}
	}()
	return nil
}

// releaseLocked runs with g.mu write-locked and unlocks it.
func (g *Guard) releaseLocked() error {
	defer g.mu.Unlock()
	if g.released {
		return nil
	}
	g.released = true
	return g.release()
}
