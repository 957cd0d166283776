package textgenapp

import (
	"context"
	"sync"
)

// Invitations for the admin API: an account the operator made has no password, so the admin
// API asks My Account of the same ledger to make an invitation link and e-mail it. My Account
// registers itself when it starts and withdraws in its Cleanup; during a reload the newest
// registration answers.

// Inviter makes and sends invitations.
type Inviter interface {
	// Invite makes a single-use link with which the account sets its password, queues it in
	// an e-mail if e-mail is on (mailed), and returns it.
	Invite(ctx context.Context, accountID string) (link string, mailed bool, err error)
}

var inviters struct {
	mu   sync.Mutex
	byLS map[appLedger][]*Inviter
}

// RegisterInviter makes i answer invitations for store until the returned func is called.
func RegisterInviter(store appLedger, i Inviter) (unregister func()) {
	inviters.mu.Lock()
	defer inviters.mu.Unlock()
	if inviters.byLS == nil {
		inviters.byLS = map[appLedger][]*Inviter{}
	}
	p := &i
	inviters.byLS[store] = append(inviters.byLS[store], p)
	return func() {
		inviters.mu.Lock()
		defer inviters.mu.Unlock()
		l := inviters.byLS[store]
		for n, q := range l {
			if q == p {
				l = append(l[:n:n], l[n+1:]...)
				break
			}
		}
		if len(l) == 0 {
			delete(inviters.byLS, store)
		} else {
			inviters.byLS[store] = l
		}
	}
}

// InviterFor returns the newest inviter registered for store, or nil.
func InviterFor(store appLedger) Inviter {
	inviters.mu.Lock()
	defer inviters.mu.Unlock()
	l := inviters.byLS[store]
	if len(l) == 0 {
		return nil
	}
	return *l[len(l)-1]
}
