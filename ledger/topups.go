package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// TopUps keeps automatic top-ups: per account a saved card (the payment provider's customer and
// payment method, with the card's brand and last four digits for display; never a card number)
// and a rule ("when fewer than Threshold credits are available, buy Package, at most MonthlyCap
// times a calendar month, UTC"), and the record of each top-up made. A top-up in flight is a
// record of status pending: BeginTopUp makes one only where none is pending, so that of several
// instances that see the same low balance at once, one pays. Records are kept for good.
type TopUps interface {
	// SaveTopUpCard stores the account's saved card, replacing one saved before, and unpauses
	// its rule (a new card is the customer's answer to a declined one). A rule saved for the
	// first time this way is disabled, with no threshold.
	//
	// Expected errors:
	//   - ErrInvalidArgument: the customer or payment method id is empty; a string too long
	//     (ids: 256 bytes; brand: 32; last4: 4) or not UTF-8.
	//   - ErrNotFound: no account has accountID.
	//   - ErrClosed; ErrUnavailable.
	SaveTopUpCard(ctx context.Context, accountID string, card TopUpCard) (TopUpRule, error)

	// SetTopUpRule saves the account's threshold, package, monthly cap and whether the rule is
	// on; the card and a pause are kept as they are.
	//
	// Expected errors:
	//   - ErrInvalidArgument: Threshold or MonthlyCap below 1 (or above 1e9 and 1000), Package
	//     empty, over 64 bytes or not UTF-8.
	//   - ErrNotFound: no account has accountID.
	//   - ErrClosed; ErrUnavailable.
	SetTopUpRule(ctx context.Context, accountID string, s TopUpSettings) (TopUpRule, error)

	// TopUpRule returns the account's rule and card.
	//
	// Expected errors: ErrNotFound (no rule or card saved for the account); ErrClosed.
	TopUpRule(ctx context.Context, accountID string) (TopUpRule, error)

	// ActiveTopUpRules returns every rule that may top up now (Active), in no set order.
	//
	// Expected errors: ErrClosed; ctx's error.
	ActiveTopUpRules(ctx context.Context) ([]TopUpRule, error)

	// PauseTopUp pauses the account's rule with why (shown to the customer) until a new card is
	// saved. A paused rule makes no top-up.
	//
	// Expected errors: ErrInvalidArgument (why empty, over 512 bytes or not UTF-8);
	// ErrNotFound (no rule); ErrClosed; ErrUnavailable.
	PauseTopUp(ctx context.Context, accountID, why string) (TopUpRule, error)

	// BeginTopUp makes a pending top-up for the account, dated by the store's clock, in one
	// step with its checks: the rule is enabled, not paused and has a card; no top-up of the
	// account is pending; fewer than MonthlyCap of its top-ups of this month (UTC) are pending
	// or succeeded. Of calls racing on any instances, one makes it. A refusal is a
	// *TopUpRefusal (errors.Is ErrTopUpRefused) that says why.
	//
	// Expected errors:
	//   - ErrTopUpRefused (a *TopUpRefusal): nothing was written.
	//   - ErrNotFound: no rule is saved for the account.
	//   - ErrClosed; ErrUnavailable.
	BeginTopUp(ctx context.Context, accountID string) (TopUp, error)

	// SetTopUpPaymentIntent records the payment the top-up made at the provider.
	//
	// Expected errors: ErrInvalidArgument (an id empty or too long); ErrNotFound (no top-up has
	// id); ErrClosed; ErrUnavailable.
	SetTopUpPaymentIntent(ctx context.Context, id, paymentIntent string) (TopUp, error)

	// FinishTopUp moves the top-up to status with detail (why it failed; shown to the customer):
	// to succeeded from any other status; to failed from pending or needs_action; to
	// needs_action from pending. A move to failed or needs_action pauses the account's rule in
	// the same step, with detail as its reason. Any other move changes nothing and returns the
	// record as it is with changed false (an event delivered twice, or late).
	//
	// Expected errors: ErrInvalidArgument (a status not one of the four, detail over 512 bytes);
	// ErrNotFound (no top-up has id); ErrClosed; ErrUnavailable.
	FinishTopUp(ctx context.Context, id, status, detail string) (t TopUp, changed bool, err error)

	// GetTopUp returns the top-up of id.
	//
	// Expected errors: ErrInvalidArgument; ErrNotFound; ErrClosed.
	GetTopUp(ctx context.Context, id string) (TopUp, error)

	// ListTopUps returns the account's top-ups ("": every account's), newest first, at most
	// limit (0: 50, at most 1000).
	//
	// Expected errors: ErrInvalidArgument (limit negative); ErrClosed; ctx's error.
	ListTopUps(ctx context.Context, accountID string, limit int) ([]TopUp, error)
}

// TopUpCard is a saved card as the payment provider names it.
type TopUpCard struct {
	CustomerID      string `json:"customer_id"`
	PaymentMethodID string `json:"payment_method_id"`
	Brand           string `json:"brand,omitempty"`
	Last4           string `json:"last4,omitempty"`
}

// TopUpSettings are what the customer chooses.
type TopUpSettings struct {
	Threshold  int64  `json:"threshold"`
	Package    string `json:"package"`
	MonthlyCap int    `json:"monthly_cap"`
	Enabled    bool   `json:"enabled"`
}

// TopUpRule is an account's card and rule.
type TopUpRule struct {
	AccountID string    `json:"account_id"`
	Card      TopUpCard `json:"card"`
	TopUpSettings
	// Paused is set by a failed or unconfirmed top-up (PausedWhy says why) and cleared by a new card.
	Paused    bool      `json:"paused,omitempty"`
	PausedWhy string    `json:"paused_why,omitempty"`
	Updated   time.Time `json:"updated"`
}

// Active reports whether the rule may top up: enabled, not paused, with a card and a threshold.
func (r TopUpRule) Active() bool {
	return r.Enabled && !r.Paused && r.Card.PaymentMethodID != "" && r.Threshold > 0 && r.Package != ""
}

// TopUp is one automatic purchase.
type TopUp struct {
	ID        string `json:"id"`
	AccountID string `json:"account_id"`
	// Month is the calendar month (UTC, "2026-12") that the monthly cap counts it in.
	Month   string `json:"month"`
	Status  string `json:"status"`
	Package string `json:"package"`
	// PaymentIntent is the provider's payment, once made.
	PaymentIntent string    `json:"payment_intent,omitempty"`
	Detail        string    `json:"detail,omitempty"`
	Created       time.Time `json:"created"`
	Updated       time.Time `json:"updated"`
}

// The statuses of a top-up.
const (
	TopUpPending     = "pending"
	TopUpSucceeded   = "succeeded"
	TopUpFailed      = "failed"
	TopUpNeedsAction = "needs_action" // the bank asks the customer to confirm (SCA)
)

// ErrTopUpRefused is BeginTopUp's refusal; the error is a *TopUpRefusal.
var ErrTopUpRefused = errors.New("no top-up made")

// Why BeginTopUp made none (TopUpRefusal.Reason).
const (
	TopUpRefusedDisabled = "disabled"
	TopUpRefusedPaused   = "paused"
	TopUpRefusedNoCard   = "no_card"
	TopUpRefusedPending  = "pending"     // a top-up of the account is in flight
	TopUpRefusedCap      = "monthly_cap" // MonthlyCap top-ups this month already
)

// TopUpRefusal says why BeginTopUp made no top-up.
type TopUpRefusal struct{ Reason string }

func (e *TopUpRefusal) Error() string        { return "no top-up made: " + e.Reason }
func (e *TopUpRefusal) Is(target error) bool { return target == ErrTopUpRefused }

// Limits of a rule.
const (
	MaxTopUpThreshold = 1_000_000_000
	MaxTopUpCap       = 1000
	maxPackageLen     = 64
)

// TopUpMonth is the month of t that the cap counts in.
func TopUpMonth(t time.Time) string { return t.UTC().Format("2006-01") }

// NewTopUpID makes a top-up id; it is also the payment provider's idempotency key.
func NewTopUpID() string { return "topup_" + RandomBase62(16) }

// CheckTopUpCard refuses a card SaveTopUpCard may not store.
func CheckTopUpCard(c TopUpCard) error {
	for _, f := range []struct {
		name, v  string
		max      int
		required bool
	}{
		{"customer id", c.CustomerID, MaxReferenceLen, true},
		{"payment method id", c.PaymentMethodID, MaxReferenceLen, true},
		{"card brand", c.Brand, 32, false},
		{"card last4", c.Last4, 4, false},
	} {
		if err := CheckString(f.name, f.v, f.max, f.required); err != nil {
			return err
		}
	}
	return nil
}

// CheckTopUpSettings refuses settings SetTopUpRule may not store.
func CheckTopUpSettings(s TopUpSettings) error {
	if s.Threshold < 1 || s.Threshold > MaxTopUpThreshold {
		return fmt.Errorf("threshold must be from 1 to %d: %w", MaxTopUpThreshold, ErrInvalidArgument)
	}
	if s.MonthlyCap < 1 || s.MonthlyCap > MaxTopUpCap {
		return fmt.Errorf("monthly cap must be from 1 to %d: %w", MaxTopUpCap, ErrInvalidArgument)
	}
	return CheckString("package", s.Package, maxPackageLen, true)
}

// CheckTopUpStatus refuses a status that is not one of the four.
func CheckTopUpStatus(status, detail string) error {
	switch status {
	case TopUpPending, TopUpSucceeded, TopUpFailed, TopUpNeedsAction:
	default:
		return fmt.Errorf("top-up status %q: %w", status, ErrInvalidArgument)
	}
	return CheckString("detail", detail, maxReasonLen, false)
}

// TopUpMove reports whether a top-up of status from may move to status to (FinishTopUp).
func TopUpMove(from, to string) bool {
	switch to {
	case TopUpSucceeded:
		return from != TopUpSucceeded
	case TopUpFailed:
		return from == TopUpPending || from == TopUpNeedsAction
	case TopUpNeedsAction:
		return from == TopUpPending
	}
	return false
}

// TopUpPauses reports whether a move to status pauses the rule.
func TopUpPauses(status string) bool { return status == TopUpFailed || status == TopUpNeedsAction }

// CheckBeginTopUp is BeginTopUp's decision on the rule and the account's top-ups (any order):
// nil, or the *TopUpRefusal. Both engines call it where the account's top-ups cannot change
// under it.
func CheckBeginTopUp(r TopUpRule, ts []TopUp, month string) error {
	switch {
	case !r.Enabled || r.Threshold <= 0 || r.Package == "":
		return &TopUpRefusal{TopUpRefusedDisabled}
	case r.Paused:
		return &TopUpRefusal{TopUpRefusedPaused}
	case r.Card.PaymentMethodID == "":
		return &TopUpRefusal{TopUpRefusedNoCard}
	}
	counted := 0
	for _, t := range ts {
		if t.Status == TopUpPending {
			return &TopUpRefusal{TopUpRefusedPending}
		}
		if t.Month == month && t.Status == TopUpSucceeded {
			counted++
		}
	}
	if counted >= r.MonthlyCap {
		return &TopUpRefusal{TopUpRefusedCap}
	}
	return nil
}

// CheckTopUpRef refuses an empty or too long id.
func CheckTopUpRef(field, v string) error { return CheckString(field, v, MaxReferenceLen, true) }
