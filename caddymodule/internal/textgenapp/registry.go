package textgenapp

import "sync"

// registry holds what modules offer for a ledger that another module (the admin API, My
// Account) asks for: the refunder, the inviter, the receipt signer, the console's key. A module
// registers when it starts and withdraws in its Cleanup; during a reload the old config's
// module and the new one's are both registered, and the newest answers.
type registry[T any] struct {
	mu sync.RWMutex // read on a request's path (HeldLive)
	// byLS holds each ledger's registrations, oldest first; each is a pointer of its own, so
	// that withdrawing one removes that one even when two registered equal values.
	byLS map[appLedger][]*T
}

// register makes v answer for store until the returned func is called (once or more).
func (r *registry[T]) register(store appLedger, v T) (unregister func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byLS == nil {
		r.byLS = map[appLedger][]*T{}
	}
	p := &v
	r.byLS[store] = append(r.byLS[store], p)
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		l := r.byLS[store]
		for n, q := range l {
			if q == p {
				l = append(l[:n:n], l[n+1:]...)
				break
			}
		}
		if len(l) == 0 {
			delete(r.byLS, store)
		} else {
			r.byLS[store] = l
		}
	}
}

// newest returns the newest registration for store, or the zero value (nil) when there is none.
func (r *registry[T]) newest(store appLedger) T {
	r.mu.RLock()
	defer r.mu.RUnlock()
	l := r.byLS[store]
	if len(l) == 0 {
		var zero T
		return zero
	}
	return *l[len(l)-1]
}
