package ledger

import (
	"fmt"
	"slices"
	"time"
)

// Credits that expire. A live grant or purchase with an expiry (GrantRequest.Expires) makes a
// lot: what of the grant is neither spent nor expired (Remaining) and what open holds took of
// it (Held). A hold takes from the lots that expire soonest first and from never-expiring
// credits (the balance less every lot's Remaining) last; a settle spends what it took, a void
// gives it back. At its expiry what is left of a lot and not held leaves the balance through
// an entry of kind KindExpire; what an open hold took stays with the hold, and leaves at once
// if the hold is voided after the expiry. Every engine applies these rules; the functions
// below are the arithmetic they share.

// KindExpire is the entry of credits that expired: a negative amount, the lot's entry named in
// its reason (ExpireReason).
const KindExpire EntryKind = "expire"

// Lot is what is left of one live grant or purchase that expires.
type Lot struct {
	// Seq is the number of the grant's entry.
	Seq uint64 `json:"seq"`
	// Amount is what the grant gave; Remaining what of it is neither spent nor expired
	// (including what open holds took); Held what open holds took of it.
	Amount    int64     `json:"amount"`
	Remaining int64     `json:"remaining"`
	Held      int64     `json:"held"`
	Expires   time.Time `json:"expires"`
}

// LotTake is what one hold took of one lot.
type LotTake struct {
	Seq     uint64 `json:"seq"`
	Credits int64  `json:"credits"`
}

// ExpiringCredits is what of an account's live credits expires at one time (Balance.Expiring).
type ExpiringCredits struct {
	Credits int64     `json:"credits"`
	Expires time.Time `json:"expires"`
}

// ExpireReason is the reason of the entry of the credits of grant entry seq that expired.
func ExpireReason(seq uint64) string { return fmt.Sprintf("credits of entry %d expired", seq) }

// SortLots orders lots as holds take from them: soonest expiry first, then oldest grant.
func SortLots(lots []Lot) {
	slices.SortFunc(lots, func(a, b Lot) int {
		if c := a.Expires.Compare(b.Expires); c != 0 {
			return c
		}
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
}

// AllocateLots takes up to price credits from the lots (sorted by SortLots) that expire after
// now, soonest first, each what of it is not held; it adds the takes to the lots' Held and
// returns them. The rest of the price comes from never-expiring credits.
func AllocateLots(lots []Lot, price int64, now time.Time) []LotTake {
	var takes []LotTake
	for i := range lots {
		if price <= 0 {
			break
		}
		l := &lots[i]
		if !l.Expires.After(now) {
			continue
		}
		n := min(price, l.Remaining-l.Held)
		if n <= 0 {
			continue
		}
		l.Held += n
		price -= n
		takes = append(takes, LotTake{Seq: l.Seq, Credits: n})
	}
	return takes
}

// ExpiringOf is Balance.Expiring of the lots (sorted by SortLots): what of each lot not expired
// by now is neither spent nor held (what would expire of the available credits), soonest
// first, one line per expiry time.
func ExpiringOf(lots []Lot, now time.Time) []ExpiringCredits {
	var out []ExpiringCredits
	for _, l := range lots {
		free := l.Remaining - l.Held
		if !l.Expires.After(now) || free <= 0 {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Expires.Equal(l.Expires) {
			out[n-1].Credits += free
			continue
		}
		out = append(out, ExpiringCredits{Credits: free, Expires: l.Expires.UTC()})
	}
	return out
}

// CheckLotGrant checks an expiring grant against the store's clock: only live grants and
// purchases expire, and not before now.
func CheckLotGrant(req GrantRequest, now time.Time) error {
	if req.Expires.IsZero() {
		return nil
	}
	if req.Mode != Live || (req.Kind != KindGrant && req.Kind != KindPurchase) {
		return fmt.Errorf("only live grants and purchases may expire: %w", ErrInvalidArgument)
	}
	if !req.Expires.After(now) {
		return fmt.Errorf("expiry %s is not in the future: %w", req.Expires.UTC().Format(time.RFC3339), ErrInvalidArgument)
	}
	return nil
}

// ExpiredLot returns the grant entry that an expire entry's reason names (ExpireReason).
func ExpiredLot(e Entry) (uint64, bool) {
	var seq uint64
	if e.Kind != KindExpire {
		return 0, false
	}
	if _, err := fmt.Sscanf(e.Reason, "credits of entry %d expired", &seq); err != nil {
		return 0, false
	}
	return seq, true
}

// LotProblems reports what Verify finds wrong with an account's lots: each must have
// 0 <= Held <= Remaining <= Amount, and Held must be what the open holds took of it (held, by
// lot). expired is what the account's expire entries took of each lot (a positive number, by
// the lot's entry, ExpiredLot), granted what those entries gave: no lot can lose more to
// expiry than its grant gave.
func LotProblems(account string, lots []Lot, held, expired, granted map[uint64]int64) []Problem {
	var out []Problem
	seen := map[uint64]bool{}
	for _, l := range lots {
		seen[l.Seq] = true
		if l.Held < 0 || l.Held > l.Remaining || l.Remaining > l.Amount {
			out = append(out, Problem{AccountID: account, Kind: "lot_out_of_range",
				Detail: fmt.Sprintf("lot of entry %d: amount %d, remaining %d, held %d", l.Seq, l.Amount, l.Remaining, l.Held)})
		}
		if h := held[l.Seq]; h != l.Held {
			out = append(out, Problem{AccountID: account, Kind: "lot_held_mismatch",
				Detail: fmt.Sprintf("lot of entry %d: held %d, its open holds took %d", l.Seq, l.Held, h)})
		}
	}
	for _, seq := range sortedKeys(held) {
		if h := held[seq]; !seen[seq] && h != 0 {
			out = append(out, Problem{AccountID: account, Kind: "lot_held_mismatch",
				Detail: fmt.Sprintf("open holds took %d of the lot of entry %d, which does not exist", h, seq)})
		}
	}
	for _, seq := range sortedKeys(expired) {
		if x := expired[seq]; x > granted[seq] {
			out = append(out, Problem{AccountID: account, Kind: "expired_too_much",
				Detail: fmt.Sprintf("%d credits of entry %d expired, which gave %d", x, seq, granted[seq])})
		}
	}
	return out
}

func sortedKeys(m map[uint64]int64) []uint64 {
	ks := make([]uint64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
