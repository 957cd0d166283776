package account

import (
	"sync"
	"time"
)

// throttle counts events per key in fixed windows: once a key has max events in its current
// window, it is blocked until the window ends. It keeps at most capacity keys: when full, it
// drops ended windows, and if none has ended, an arbitrary key, so that a flood of new keys
// costs bounded memory (at worst it forgets some counts; it never blocks everyone).
//
// The state is per handler instance and in memory: a config reload or restart starts afresh.
type throttle struct {
	max      int
	window   time.Duration
	capacity int

	mu   sync.Mutex
	keys map[string]*throttleWindow
}

type throttleWindow struct {
	start time.Time
	n     int
}

func newThrottle(max int, window time.Duration, capacity int) *throttle {
	return &throttle{max: max, window: window, capacity: capacity, keys: map[string]*throttleWindow{}}
}

// take counts one attempt for key at t, unless key is at its limit: then it counts nothing and
// reports for how much longer. Checking and counting under one lock is what makes the limit
// hold for attempts sent all at once: each one is counted before its password is checked, and
// refunded if it turns out not to count (a successful log-in, say).
func (th *throttle) take(key string, t time.Time) (ok bool, wait time.Duration) {
	th.mu.Lock()
	defer th.mu.Unlock()
	w := th.keys[key]
	if w == nil || !t.Before(w.start.Add(th.window)) {
		if w == nil && len(th.keys) >= th.capacity {
			th.evict(t)
		}
		w = &throttleWindow{start: t}
		th.keys[key] = w
	}
	if w.n >= th.max {
		return false, w.start.Add(th.window).Sub(t)
	}
	w.n++
	return true, 0
}

// refund takes back an attempt that take counted at t, if its window is still the current one.
func (th *throttle) refund(key string, t time.Time) {
	th.mu.Lock()
	defer th.mu.Unlock()
	if w := th.keys[key]; w != nil && w.n > 0 && !t.Before(w.start) && t.Before(w.start.Add(th.window)) {
		w.n--
	}
}

// reset forgets key (a successful log-in clears its account's failures).
func (th *throttle) reset(key string) {
	th.mu.Lock()
	delete(th.keys, key)
	th.mu.Unlock()
}

// evict is called with th.mu held and the map full.
func (th *throttle) evict(t time.Time) {
	for k, w := range th.keys {
		if !t.Before(w.start.Add(th.window)) {
			delete(th.keys, k)
		}
	}
	for k := range th.keys {
		if len(th.keys) < th.capacity {
			return
		}
		delete(th.keys, k)
	}
}

func (th *throttle) size() int {
	th.mu.Lock()
	defer th.mu.Unlock()
	return len(th.keys)
}
