package ledger

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"time"
)

// Reversals is money that flows back: a purchase refunded or disputed (a chargeback) at the
// payment provider takes that purchase's share of credits off the account, once per refund or
// dispute id, whichever instance receives the provider's event and however often.
//
// A refund or dispute names the provider's payment (a Stripe PaymentIntent), not the Checkout
// Session that a purchase entry is keyed by, so the webhook records each paid (or pending) session
// with its payment first (RecordPayment); Reverse finds the purchase through it.
//
// Credits taken back may already be spent: then the live balance goes below zero, a debt, which
// holds refuse (no credit is available) until purchases pay it. It is the one way a balance may
// go negative: for every account, available >= -(credits that refunds and disputes took and did
// not give back), which Verify checks.
type Reversals interface {
	// RecordPayment stores or advances the payment p.ID (Created and Updated are set by the
	// store; the refund and dispute figures are the store's and are ignored). A payment moves
	// from pending to paid or failed once; a paid or failed payment never changes again, so a
	// late or repeated event changes nothing: then the stored payment is returned with repeated
	// set.
	//
	// Expected errors:
	//   - ErrInvalidArgument: ID, Reference or Currency empty; a string too long (ID, Reference,
	//     AccountID, Package: 256 bytes; Currency: 8) or not UTF-8; AmountCents or Credits
	//     negative; Status not one of the PaymentStatus values; Credits with a status other than
	//     paid.
	//   - ErrClosed; ErrUnavailable (nothing was written).
	RecordPayment(ctx context.Context, p Payment) (rec Payment, repeated bool, err error)

	// GetPayment returns the payment of id.
	//
	// Expected errors:
	//   - ErrInvalidArgument: id empty or too long.
	//   - ErrNotFound: no payment has id.
	//   - ErrClosed; ctx's error.
	GetPayment(ctx context.Context, id string) (Payment, error)

	// PaymentOf returns the payment of the purchase reference (its Checkout Session id).
	//
	// Expected errors:
	//   - ErrInvalidArgument: reference empty or too long.
	//   - ErrNotFound: no payment has that reference.
	//   - ErrClosed; ctx's error.
	PaymentOf(ctx context.Context, reference string) (Payment, error)

	// AccountPayments returns the account's payments, newest first, at most limit (0: 50, at
	// most 1000).
	//
	// Expected errors:
	//   - ErrInvalidArgument: limit is negative.
	//   - ErrClosed; ctx's error.
	AccountPayments(ctx context.Context, accountID string, limit int) ([]Payment, error)

	// Reverse applies one refund or dispute event (the rules: reverse, below) to the payment it
	// names, once durable. Each (ID, step) applies once: a refund is taken off once and given
	// back once if it fails; a dispute freezes once and closes once. A repeated or stale event
	// changes nothing and returns the reversal as it is with Repeated set. An entry of kind
	// refund or dispute records every change of credits (and a lost dispute, with 0).
	//
	// Expected errors:
	//   - ErrInvalidArgument: a bad kind or status; ID, Payment empty or too long; a string not
	//     UTF-8; AmountCents negative; ID used by a reversal of the other kind.
	//   - ErrNotFound: no payment has req.Payment, or it is still pending (not recorded, or not
	//     paid, yet: the caller retries later).
	//   - ErrClosed; ErrUnavailable.
	Reverse(ctx context.Context, req ReversalRequest) (ReversalResult, error)

	// ListReversals returns the reversals, of one account if accountID is not empty, of one
	// kind if kind is not empty, last changed first, at most limit (0: 50, at most 1000).
	//
	// Expected errors:
	//   - ErrInvalidArgument: limit is negative, or an unknown kind.
	//   - ErrClosed; ctx's error.
	ListReversals(ctx context.Context, accountID string, kind ReversalKind, limit int) ([]Reversal, error)
}

// PaymentStatus is where a payment stands at the provider.
type PaymentStatus string

const (
	// PaymentPending: the Checkout Session completed, but its payment method settles later
	// (SEPA Direct Debit...): nothing credited yet.
	PaymentPending PaymentStatus = "pending"
	// PaymentPaid: the money arrived (credited, or kept as an unmatched payment with Credits 0).
	PaymentPaid PaymentStatus = "paid"
	// PaymentFailed: the delayed payment failed; nothing was credited.
	PaymentFailed PaymentStatus = "failed"
)

// Payment is one payment at the provider for a purchase (a Stripe PaymentIntent of a Checkout
// Session).
type Payment struct {
	// ID is the provider's payment id (pi_...), which refunds and disputes name.
	ID string `json:"id"`
	// Reference is the purchase's reference (the Checkout Session id), the purchase entry's.
	Reference string `json:"reference"`
	AccountID string `json:"account_id,omitempty"`
	Package   string `json:"package,omitempty"`
	// Credits is what the purchase credited (0: nothing, e.g. an unmatched payment).
	Credits     int64         `json:"credits"`
	AmountCents int64         `json:"amount_cents"`
	Currency    string        `json:"currency"`
	Status      PaymentStatus `json:"status"`
	// RefundedCents is the sum of the refunds applied, DisputedCents of the disputes open or
	// lost; RefundedCredits and DisputedCredits the credits that they took off (set by the
	// store: reverse).
	RefundedCents   int64     `json:"refunded_cents,omitempty"`
	RefundedCredits int64     `json:"refunded_credits,omitempty"`
	DisputedCents   int64     `json:"disputed_cents,omitempty"`
	DisputedCredits int64     `json:"disputed_credits,omitempty"`
	Created         time.Time `json:"created"`
	Updated         time.Time `json:"updated"`
}

// ReversalKind is what took money back.
type ReversalKind string

const (
	ReversalRefund  ReversalKind = "refund"
	ReversalDispute ReversalKind = "dispute"
)

// The states a reversal request reports and a reversal is in.
const (
	// Refunds: applied (the provider's pending or succeeded: the money is on its way back),
	// failed (the provider's failed or canceled: the credits are given back).
	RefundApplied = "applied"
	RefundFailed  = "failed"
	// Disputes: open (any state before the end, an inquiry included: the credits are frozen,
	// taken off), won (given back), lost (final).
	DisputeOpen = "open"
	DisputeWon  = "won"
	DisputeLost = "lost"
)

// ReversalRequest is one provider event about a refund or a dispute.
type ReversalRequest struct {
	// ID is the refund's or dispute's id at the provider (re_..., du_...).
	ID   string
	Kind ReversalKind
	// Payment is the payment it takes money from (Payment.ID).
	Payment string
	// AmountCents and Currency are the refunded or disputed amount.
	AmountCents int64
	Currency    string
	// Status is RefundApplied or RefundFailed, or DisputeOpen, DisputeWon or DisputeLost.
	Status string
	// Reason is the provider's (requested_by_customer, fraudulent...), Event its event id.
	Reason string
	Event  string
}

// Reversal is a refund or dispute as the ledger applied it.
type Reversal struct {
	ID          string       `json:"id"`
	Kind        ReversalKind `json:"kind"`
	Payment     string       `json:"payment"`
	AccountID   string       `json:"account_id,omitempty"`
	Reference   string       `json:"reference"` // the purchase's
	AmountCents int64        `json:"amount_cents"`
	Currency    string       `json:"currency,omitempty"`
	// Credits is what it has taken off the account and not given back.
	Credits int64     `json:"credits"`
	Status  string    `json:"status"`
	Reason  string    `json:"reason,omitempty"`
	Event   string    `json:"event,omitempty"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// ReversalResult reports a Reverse: the reversal and payment after it, the entry it wrote (zero
// when none: a repeated event, a payment that credited nothing), and the account's balance
// (zero without an account).
type ReversalResult struct {
	Reversal Reversal `json:"reversal"`
	Payment  Payment  `json:"payment"`
	Entry    Entry    `json:"entry,omitzero"`
	Balance  Balance  `json:"balance,omitzero"`
	Repeated bool     `json:"repeated,omitempty"`
}

// The entry kinds of reversals (Entry.Kind): a refund takes credits off (or gives them back when
// it failed), a dispute freezes them (takes them off), gives them back when won, and records its
// loss with amount 0.
const (
	KindRefund  EntryKind = "refund"
	KindDispute EntryKind = "dispute"
)

// CheckPayment refuses what RecordPayment may not store.
func CheckPayment(p Payment) error {
	for _, f := range []struct {
		name, v  string
		max      int
		required bool
	}{
		{"payment id", p.ID, MaxReferenceLen, true},
		{"reference", p.Reference, MaxReferenceLen, true},
		{"account id", p.AccountID, MaxReferenceLen, false},
		{"package", p.Package, MaxReferenceLen, false},
		{"currency", p.Currency, maxCurrencyLen, true},
	} {
		if err := CheckString(f.name, f.v, f.max, f.required); err != nil {
			return err
		}
	}
	switch {
	case p.AmountCents < 0 || p.Credits < 0:
		return fmt.Errorf("amount and credits must not be negative: %w", ErrInvalidArgument)
	case p.Status != PaymentPending && p.Status != PaymentPaid && p.Status != PaymentFailed:
		return fmt.Errorf("payment status %q is not pending, paid or failed: %w", p.Status, ErrInvalidArgument)
	case p.Credits > 0 && p.Status != PaymentPaid:
		return fmt.Errorf("a %s payment credited nothing: %w", p.Status, ErrInvalidArgument)
	}
	return nil
}

// AdvancePayment is the stored payment after RecordPayment(p): old (nil when there is none)
// moves from pending to p's status; repeated when nothing changes.
func AdvancePayment(old *Payment, p Payment, t time.Time) (Payment, bool) {
	if old != nil && (old.Status != PaymentPending || p.Status == PaymentPending) {
		return *old, true
	}
	p.RefundedCents, p.RefundedCredits, p.DisputedCents, p.DisputedCredits = 0, 0, 0, 0
	p.Created, p.Updated = t, t
	if old != nil {
		p.Created = old.Created
	}
	return p, false
}

// CheckReversal refuses a bad Reverse request.
func CheckReversal(req ReversalRequest) error {
	for _, f := range []struct {
		name, v  string
		max      int
		required bool
	}{
		{"reversal id", req.ID, MaxReferenceLen - 8, true}, // room for "/failed" in the entry's reference
		{"payment id", req.Payment, MaxReferenceLen, true},
		{"currency", req.Currency, maxCurrencyLen, false},
		{"reason", req.Reason, maxProblemLen, false},
		{"event", req.Event, MaxReferenceLen, false},
	} {
		if err := CheckString(f.name, f.v, f.max, f.required); err != nil {
			return err
		}
	}
	if req.AmountCents < 0 {
		return fmt.Errorf("amount must not be negative: %w", ErrInvalidArgument)
	}
	switch {
	case req.Kind == ReversalRefund && (req.Status == RefundApplied || req.Status == RefundFailed):
	case req.Kind == ReversalDispute && (req.Status == DisputeOpen || req.Status == DisputeWon || req.Status == DisputeLost):
	default:
		return fmt.Errorf("reversal kind %q with status %q: %w", req.Kind, req.Status, ErrInvalidArgument)
	}
	return nil
}

// CheckReversible refuses an event about payment p that the ledger cannot apply yet: p is
// pending (its purchase credits nothing until it succeeds), so the event arrived before the
// Payment's success, which Stripe does not promise to deliver first. Applied then, it would take
// nothing, and the success would credit the whole purchase: ErrNotFound, as for a payment not
// recorded yet, so that the caller retries once the payment is paid.
func CheckReversible(p Payment, req ReversalRequest) error {
	if p.Status == PaymentPending {
		return fmt.Errorf("payment %q of %s %q is still pending: %w", p.ID, req.Kind, req.ID, ErrNotFound)
	}
	return nil
}

// checkReversalKind refuses a kind to list by that is neither empty nor a kind.
func checkReversalKind(k ReversalKind) error {
	if k != "" && k != ReversalRefund && k != ReversalDispute {
		return fmt.Errorf("reversal kind %q: %w", k, ErrInvalidArgument)
	}
	return nil
}

// creditsFor is the share of p's credits that cents of its price buys back, rounded up: a
// refund of 1 cent of a 2.00 EUR package of 10 credits takes 1 credit. Rounding up is in the
// operator's favour, because the credits are sold in whole units and a customer who got money
// back must not keep a fraction of a credit that rounding down would leave. Never more than the
// purchase's credits.
func creditsFor(p Payment, cents int64) int64 {
	switch {
	case cents <= 0 || p.Credits <= 0:
		return 0
	case p.AmountCents <= 0 || cents >= p.AmountCents:
		return p.Credits
	}
	hi, lo := bits.Mul64(uint64(cents), uint64(p.Credits))
	q, r := bits.Div64(hi, lo, uint64(p.AmountCents)) // hi < AmountCents: cents < AmountCents
	if r != 0 {
		q++
	}
	return int64(q)
}

// reversalStep is what Reverse writes: the payment and reversal after the event, and the entry
// (when delta != 0 or it records a loss; none when the payment credited nothing).
type reversalStep struct {
	Payment  Payment
	Reversal Reversal
	Entry    bool
	kind     EntryKind
	Delta    int64  // credits to add to the live balance (negative: taken off)
	ref      string // the entry's reference: the reversal id, then id/won, id/lost, id/failed
	reason   string
	Repeated bool
}

// takenBy is what refunds and disputes take off purchase p together, split into the refunds'
// part and the disputes': the share of all the money they took back or hold (the refunded
// cents, and the cents of the disputes open or lost), rounded up once (creditsFor), never more
// than the purchase credited. Refunds come first: their part is the share of the refunded cents
// alone, the disputes' the rest. So the purchase keeps what it paid for less what came back,
// whatever the order of its events: a dispute freezes only what refunds have not taken; when it
// closes in the payment's favour, it gives back only what refunds made meanwhile have not taken;
// a lost one keeps what it froze.
func takenBy(p Payment) (refunded, disputed int64) {
	r, d := max(p.RefundedCents, 0), max(p.DisputedCents, 0)
	all := r + d
	if all < r { // overflow: more than any purchase
		all = math.MaxInt64
	}
	refunded = creditsFor(p, r)
	return refunded, max(creditsFor(p, all)-refunded, 0)
}

// Reverse is the one rule of money that flows back, for every engine: what req does to payment
// p, whose reversal req.ID was prev (nil: none yet). The event moves the payment's money
// figures (RefundedCents, DisputedCents); the credits taken off follow from them (takenBy), and
// the event's entry is the difference. Refunds add up, so partial refunds round once, not each.
// A reversal's Credits is what its event took off and has not given back.
func Reverse(p Payment, prev *Reversal, req ReversalRequest, t time.Time) reversalStep {
	st := reversalStep{Payment: p}
	if prev != nil {
		st.Reversal = *prev
	} else {
		st.Reversal = Reversal{ID: req.ID, Kind: req.Kind, Payment: p.ID, AccountID: p.AccountID, Reference: p.Reference,
			AmountCents: req.AmountCents, Currency: req.Currency, Reason: req.Reason, Created: t}
	}
	r := &st.Reversal
	pay := &st.Payment
	money := func(cents int64) string {
		return fmt.Sprintf("%d.%02d %s", cents/100, cents%100, r.Currency)
	}
	switch {
	case req.Kind == ReversalRefund && req.Status == RefundApplied:
		if prev != nil {
			st.Repeated = true
			return st
		}
		pay.RefundedCents += req.AmountCents
		r.Credits, r.Status = -st.retake(), RefundApplied
		st.kind, st.ref = KindRefund, r.ID
		st.reason = fmt.Sprintf("refund of %s of purchase %s", money(req.AmountCents), p.Reference)
	case req.Kind == ReversalRefund: // failed
		if prev != nil && prev.Status == RefundFailed {
			st.Repeated = true
			return st
		}
		r.Status = RefundFailed
		if prev == nil { // it failed before its creation arrived: nothing was taken
			break
		}
		pay.RefundedCents -= prev.AmountCents
		st.retake()
		st.kind, st.ref = KindRefund, r.ID+"/failed"
		st.reason = fmt.Sprintf("refund %s failed: credits given back", r.ID)
		r.Credits = 0
	case req.Status == DisputeOpen:
		if prev != nil {
			st.Repeated = true
			return st
		}
		st.freeze(req)
	case prev != nil && prev.Status != DisputeOpen: // closed before
		st.Repeated = true
		return st
	case req.Status == DisputeWon:
		r.Status = DisputeWon
		if prev == nil { // closed before its creation arrived: nothing was frozen
			break
		}
		pay.DisputedCents -= prev.AmountCents
		st.retake()
		st.kind, st.ref = KindDispute, r.ID+"/won"
		st.reason = fmt.Sprintf("dispute %s won: frozen credits given back", r.ID)
		if st.Delta < prev.Credits {
			st.reason = fmt.Sprintf("dispute %s won: frozen credits given back, less what refunds took meanwhile", r.ID)
		}
		r.Credits = 0
	default: // lost
		if prev == nil {
			st.freeze(req)
		} else {
			st.kind, st.ref = KindDispute, r.ID+"/lost"
		}
		r.Status = DisputeLost
		st.reason = fmt.Sprintf("dispute %s of purchase %s lost (%s): final", r.ID, p.Reference, money(r.AmountCents))
	}
	r.Updated, pay.Updated = t, t
	if req.Event != "" {
		r.Event = req.Event
	}
	st.Entry = st.kind != "" && p.Credits > 0 && p.AccountID != ""
	return st
}

// retake sets the payment's credit figures from its money figures (takenBy) and the step's delta
// to the difference, which it returns: negative when the event takes credits off, positive when
// it gives them back.
func (st *reversalStep) retake() int64 {
	pay := &st.Payment
	before := pay.RefundedCredits + pay.DisputedCredits
	pay.RefundedCredits, pay.DisputedCredits = takenBy(*pay)
	st.Delta = before - pay.RefundedCredits - pay.DisputedCredits
	return st.Delta
}

// freeze takes a new dispute's share of the purchase off: what refunds and other disputes have
// not taken yet.
func (st *reversalStep) freeze(req ReversalRequest) {
	p := st.Payment
	st.Payment.DisputedCents += req.AmountCents
	st.Reversal.Credits, st.Reversal.Status = max(-st.retake(), 0), DisputeOpen
	st.kind, st.ref = KindDispute, st.Reversal.ID
	reason := req.Reason
	if reason == "" {
		reason = "no reason given"
	}
	st.reason = fmt.Sprintf("dispute %s of purchase %s (%s): credits frozen", st.Reversal.ID, p.Reference, reason)
}

// Entry is the ledger entry of the step (amount, figures and number set by the engine).
func (st *reversalStep) EntryOf() Entry {
	return Entry{Kind: st.kind, Mode: Live, Reference: st.ref, Reason: st.reason,
		AmountCents: st.Reversal.AmountCents, Currency: st.Reversal.Currency}
}

// CheckSameReversal refuses an event whose id names a reversal of another kind or payment.
func CheckSameReversal(prev *Reversal, req ReversalRequest) error {
	if prev != nil && (prev.Kind != req.Kind || prev.Payment != req.Payment) {
		return fmt.Errorf("%s %q of payment %q: the id is a %s of payment %q: %w",
			req.Kind, req.ID, req.Payment, prev.Kind, prev.Payment, ErrInvalidArgument)
	}
	return nil
}

// CompareReversals orders reversals last changed first, by id among those of one time (every
// engine's order).
func CompareReversals(a, b Reversal) int {
	if c := b.Updated.Compare(a.Updated); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}
