package badgerledger

import (
	"strconv"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// The member's monthly cap in the Badger engine's hold path: the one place where a hold of an
// organisation's member is counted against the member's month (memberHold) and a void or
// expiry gives the count back (memberResolve). Both run under the account's mutex, in the
// hold's or resolution's own write, so the count and the hold are durable together and holds
// racing on one organisation are counted one after the other.

// keyMemberOf is the member whose key keyID of account a is (KeyMember), or a's own id for a key
// it does not know.
func (s *Badger) keyMemberOf(a *account, keyID string) string {
	e := a.key(keyID)
	if e == nil {
		return a.id
	}
	return ledger.KeyMember(*e.rec.Load())
}

// memberHold counts a hold of c credits of mode by key keyID at t against its member's month and returns the
// write of the new count, or ErrMemberCapReached (nothing changed) when the cap is used up. A
// personal account, a test credit, a hold without a key or a key of no accepted member counts
// nothing. Called with a.mu held, after every other check of the hold.
func (s *Badger) memberHold(a *account, keyID string, mode ledger.Mode, t time.Time, c int64) ([]write, error) {
	o := a.org
	if o == nil || mode != ledger.Live || keyID == "" {
		return nil, nil
	}
	m := s.keyMemberOf(a, keyID)
	rec, ok := o.members[m]
	if !ok || rec.Pending {
		return nil, nil
	}
	uk := usageKey{m, ledger.MonthOf(t)}
	n := o.used[uk]
	if rec.MonthlyCap > 0 && n+c > rec.MonthlyCap {
		return nil, ledger.ErrMemberCapReached
	}
	o.used[uk] = n + c
	return []write{o.usageWrite(a.id, uk)}, nil
}

// memberResolve gives a voided or expired hold's count back to its member's month (the month
// the hold was taken in) and returns the write; a settle keeps it counted. Called with a.mu held.
func (s *Badger) memberResolve(a *account, h *holdRecord) []write {
	o := a.org
	if o == nil || h.State != ledger.HoldVoided || h.Mode != ledger.Live || h.KeyID == "" {
		return nil
	}
	uk := usageKey{s.keyMemberOf(a, h.KeyID), ledger.MonthOf(h.Created)}
	n, ok := o.used[uk]
	if !ok || n <= 0 {
		return nil
	}
	o.used[uk] = max(n-ledger.HeldCredits(h.Credits), 0)
	return []write{o.usageWrite(a.id, uk)}
}

// memberRetake counts again, for a hold settled after its expiry's void (settleLateLocked),
// what memberResolve gave back. Called with a.mu held.
func (s *Badger) memberRetake(a *account, h *holdRecord) []write {
	o := a.org
	if o == nil || h.Mode != ledger.Live || h.KeyID == "" {
		return nil
	}
	uk := usageKey{s.keyMemberOf(a, h.KeyID), ledger.MonthOf(h.Created)}
	if _, ok := o.used[uk]; !ok {
		return nil // the hold counted nothing (no member, or a pending one)
	}
	o.used[uk] += ledger.HeldCredits(h.Credits)
	return []write{o.usageWrite(a.id, uk)}
}

func (o *orgState) usageWrite(org string, uk usageKey) write {
	return set(memberUsageKey(org, uk.member, uk.month), strconv.AppendInt(nil, o.used[uk], 10))
}
