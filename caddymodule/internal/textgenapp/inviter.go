package textgenapp

import "context"

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

var inviters registry[Inviter]

// RegisterInviter makes i answer invitations for store until the returned func is called.
func RegisterInviter(store appLedger, i Inviter) (unregister func()) {
	return inviters.register(store, i)
}

// InviterFor returns the newest inviter registered for store, or nil.
func InviterFor(store appLedger) Inviter { return inviters.newest(store) }
