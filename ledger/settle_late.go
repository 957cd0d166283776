package ledger

import "time"

// A settle that was decided while its hold was alive and reaches the ledger only after the sweep
// voided the hold as expired (the instance, or the database, stalled in between) is not lost:
// SettleDecided charges the hold after all, once, with an entry of kind settle whose reason is
// SettledLateReason, and the hold becomes settled. The void's entry stays in the history; the
// settle after it takes the credit that the void gave back, so it is refused (the hold stays
// voided) when that credit is no longer available. A hold that is really abandoned is never
// settled and stays voided.

// SettledLateReason is the reason of a settle entry that charges a hold after the sweep voided
// it: the text was delivered before the hold expired.
const SettledLateReason = "delivered before the hold expired"

// expiredReason is the reason of the sweep's void.
const expiredReason = "expired"

// LateSettleAllowed reports whether a hold in state with reason, expiring at expires, may still
// be settled by a charge decided at decided: the sweep voided it, and the charge was decided
// before it expired.
func LateSettleAllowed(state HoldState, reason string, expires, decided time.Time) bool {
	return state == HoldVoided && reason == expiredReason && !decided.IsZero() && decided.Before(expires)
}
