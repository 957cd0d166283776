package ledger

import (
	"context"
	"fmt"
	"time"
)

// Payments keeps the payments that came in but could not be credited: a paid Checkout Session
// of another amount than its package's price, of a package that is not configured, or for an
// account that does not exist. The money arrived and no credit did, so the record is the
// operator's to-do list: they credit the right account by hand or refund, then mark the
// payment resolved. A record is never deleted.
type Payments interface {
	// RecordUnmatchedPayment stores p (Created and the resolution are set by the store) once
	// durable, once per Reference: a repeated Reference (the payment provider delivers an event
	// at least once) changes nothing and returns the first record with repeated set.
	//
	// Expected errors:
	//   - ErrInvalidArgument: Reference, Problem or Currency empty; a string too long (Reference,
	//     Event, AccountID, Package: 256 bytes; Problem: 64; Currency: 8; Detail: 512) or not
	//     UTF-8; AmountCents or Credits negative.
	//   - ErrClosed; ErrUnavailable (the store takes no new work: nothing was written).
	RecordUnmatchedPayment(ctx context.Context, p UnmatchedPayment) (rec UnmatchedPayment, repeated bool, err error)

	// UnmatchedPayments returns the recorded payments, newest first, at most limit (0: 50, at
	// most 1000); with openOnly, only those not resolved yet.
	//
	// Expected errors:
	//   - ErrInvalidArgument: limit is negative.
	//   - ErrClosed; ctx's error.
	UnmatchedPayments(ctx context.Context, openOnly bool, limit int) ([]UnmatchedPayment, error)

	// ResolveUnmatchedPayment marks the payment of reference resolved with a note (what the
	// operator did: "credited acct_... by hand", "refunded") once durable, and returns it. A
	// payment resolved before is returned as it is, with its first resolution, and repeated set.
	//
	// Expected errors:
	//   - ErrInvalidArgument: the reference is empty or too long, the note is empty, over 512
	//     bytes or not UTF-8.
	//   - ErrNotFound: no payment has that reference.
	//   - ErrClosed; ErrUnavailable (a store that can write nothing: Badger opened read-only
	//     on a full disk).
	ResolveUnmatchedPayment(ctx context.Context, reference, note string) (rec UnmatchedPayment, repeated bool, err error)
}

// UnmatchedPayment is a payment that arrived and credited nothing.
type UnmatchedPayment struct {
	// Reference is the payment's id at the provider (a Stripe Checkout Session id).
	Reference string `json:"reference"`
	// Event is the provider's event that reported it.
	Event string `json:"event,omitempty"`
	// AccountID is the account the payment named; with ProblemUnknownAccount, no such account
	// exists.
	AccountID string `json:"account_id,omitempty"`
	// Package and Credits are the package the payment was for and its credits, as far as known.
	Package string `json:"package,omitempty"`
	Credits int64  `json:"credits,omitempty"`
	// AmountCents and Currency are what was paid (Currency as the provider wrote it).
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	// Problem says why nothing was credited: one of the Problem constants.
	Problem string `json:"problem"`
	// Detail explains it to the operator, e.g. the package's price.
	Detail  string    `json:"detail,omitempty"`
	Created time.Time `json:"created"`
	// Resolved is when the operator marked it resolved (zero while open), Resolution their note.
	Resolved   time.Time `json:"resolved,omitzero"`
	Resolution string    `json:"resolution,omitempty"`
}

// Why a payment credited nothing (UnmatchedPayment.Problem).
const (
	ProblemAmountMismatch = "amount_mismatch" // paid another amount or currency than the package's price
	ProblemUnknownPackage = "unknown_package" // the package is not configured
	ProblemUnknownAccount = "unknown_account" // the account does not exist
)

// Limits on an unmatched payment's strings.
const (
	maxProblemLen = 64
)

// CheckUnmatchedPayment refuses what RecordUnmatchedPayment may not store.
func CheckUnmatchedPayment(p UnmatchedPayment) error {
	for _, f := range []struct {
		name, v  string
		max      int
		required bool
	}{
		{"reference", p.Reference, MaxReferenceLen, true},
		{"event", p.Event, MaxReferenceLen, false},
		{"account id", p.AccountID, MaxReferenceLen, false},
		{"package", p.Package, MaxReferenceLen, false},
		{"currency", p.Currency, maxCurrencyLen, true},
		{"problem", p.Problem, maxProblemLen, true},
		{"detail", p.Detail, maxReasonLen, false},
	} {
		if err := CheckString(f.name, f.v, f.max, f.required); err != nil {
			return err
		}
	}
	if p.AmountCents < 0 || p.Credits < 0 {
		return fmt.Errorf("amount and credits must not be negative: %w", ErrInvalidArgument)
	}
	return nil
}

// CheckResolvePayment refuses a resolution without a reference or a note.
func CheckResolvePayment(reference, note string) error {
	if err := CheckString("reference", reference, MaxReferenceLen, true); err != nil {
		return err
	}
	return CheckString("note", note, maxReasonLen, true)
}
