package ledger

import (
	"sync"
	"sync/atomic"
	"time"
)

// lifecycle is what every engine does to run its background work, admit calls and close, written
// once: an engine embeds it, starts its periodic work with every, brackets each call with begin
// and end, and closes through shutdown.
type lifecycle struct {
	// closeMu is held shared by every call in flight (begin..end) and exclusively by shutdown,
	// so that closing waits for the calls in flight.
	closeMu   sync.RWMutex
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	stopBg    chan struct{}
	bg        sync.WaitGroup
}

// startLifecycle readies l; call it before every, begin and shutdown.
func (l *lifecycle) startLifecycle() { l.stopBg = make(chan struct{}) }

// every runs f every d until shutdown; d < 0 disables it. f may watch stopping to end early.
func (l *lifecycle) every(d time.Duration, f func()) {
	if d < 0 {
		return
	}
	l.run(func(stop <-chan struct{}) {
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
func (l *lifecycle) run(f func(stop <-chan struct{})) {
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		f(l.stopBg)
	}()
}

// stopping is closed when shutdown begins: background work that runs long checks it.
func (l *lifecycle) stopping() <-chan struct{} { return l.stopBg }

// begin admits a call (ErrClosed once shutdown began); end releases it.
func (l *lifecycle) begin() error {
	l.closeMu.RLock()
	if l.closed.Load() {
		l.closeMu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (l *lifecycle) end() { l.closeMu.RUnlock() }

// shutdown closes once: it refuses new calls, stops the background work and waits for it, waits
// for the calls in flight and runs release with closeMu held exclusively. Every call returns
// the first one's result.
func (l *lifecycle) shutdown(release func() error) error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.stopBg)
		l.bg.Wait()
		l.closeMu.Lock()
		defer l.closeMu.Unlock()
		l.closeErr = release()
	})
	return l.closeErr
}
