package ledger

import (
	"sync"
	"sync/atomic"
	"time"
)

// Lifecycle is what every engine does to run its background work, admit calls and close, written
// once: an engine holds one, starts its periodic work with Every, brackets each call with Begin
// and End, and closes through Shutdown.
type Lifecycle struct {
	// CloseMu is held shared by every call in flight (Begin..End) and exclusively by Shutdown,
	// so that closing waits for the calls in flight.
	CloseMu   sync.RWMutex
	Closed    atomic.Bool // set once Shutdown began
	closeOnce sync.Once
	closeErr  error
	stopBg    chan struct{}
	bg        sync.WaitGroup
}

// StartLifecycle readies l; call it before Every, Begin and Shutdown.
func (l *Lifecycle) StartLifecycle() { l.stopBg = make(chan struct{}) }

// Every runs f every d until Shutdown; d < 0 disables it. f may watch Stopping to end early.
func (l *Lifecycle) Every(d time.Duration, f func()) {
	if d < 0 {
		return
	}
	l.Run(func(stop <-chan struct{}) {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				f()
			}
		}
	})
}

// Run runs f in a goroutine of its own that Shutdown stops (by closing stop) and waits for.
func (l *Lifecycle) Run(f func(stop <-chan struct{})) {
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		f(l.stopBg)
	}()
}

// Stopping is closed when Shutdown begins: background work that runs long checks it.
func (l *Lifecycle) Stopping() <-chan struct{} { return l.stopBg }

// Begin admits a call (ErrClosed once Shutdown began); End releases it.
func (l *Lifecycle) Begin() error {
	l.CloseMu.RLock()
	if l.Closed.Load() {
		l.CloseMu.RUnlock()
		return ErrClosed
	}
	return nil
}

// End releases a call that Begin admitted.
func (l *Lifecycle) End() { l.CloseMu.RUnlock() }

// Shutdown closes once: it refuses new calls, stops the background work and waits for it, waits
// for the calls in flight and runs release with CloseMu held exclusively. Every call returns
// the first one's result.
func (l *Lifecycle) Shutdown(release func() error) error {
	l.closeOnce.Do(func() {
		l.Closed.Store(true)
		close(l.stopBg)
		l.bg.Wait()
		l.CloseMu.Lock()
		defer l.CloseMu.Unlock()
		l.closeErr = release()
	})
	return l.closeErr
}
