package ledger

import (
	"sync"
	"sync/atomic"
	"time"
)

// lifecycle is what every engine does to run its background work, admit calls and close, written
// once: an engine embeds it, starts its periodic work with every, brackets each call with begin
// and end, and closes through shutdown.
type Lifecycle struct {
	// closeMu is held shared by every call in flight (begin..end) and exclusively by shutdown,
	// so that closing waits for the calls in flight.
	CloseMu   sync.RWMutex
	Closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	stopBg    chan struct{}
	bg        sync.WaitGroup
}

// startLifecycle readies l; call it before every, begin and shutdown.
func (l *Lifecycle) StartLifecycle() { l.stopBg = make(chan struct{}) }

// every runs f every d until shutdown; d < 0 disables it. f may watch stopping to end early.
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

// run runs f in a goroutine of its own that shutdown stops (by closing stop) and waits for.
func (l *Lifecycle) Run(f func(stop <-chan struct{})) {
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		f(l.stopBg)
	}()
}

// stopping is closed when shutdown begins: background work that runs long checks it.
func (l *Lifecycle) Stopping() <-chan struct{} { return l.stopBg }

// begin admits a call (ErrClosed once shutdown began); end releases it.
func (l *Lifecycle) Begin() error {
	l.CloseMu.RLock()
	if l.Closed.Load() {
		l.CloseMu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (l *Lifecycle) End() { l.CloseMu.RUnlock() }

// shutdown closes once: it refuses new calls, stops the background work and waits for it, waits
// for the calls in flight and runs release with closeMu held exclusively. Every call returns
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
