package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// The actions on money and access that the admin API, the CLI (through it) and the operator's
// web console (caddymodule/console) all take: one function each, so that the three check the
// same rules and can never disagree. Their errors are caddy.APIError, whose HTTPStatus says what
// kind of refusal it is and whose message is written for the operator.

// CreditLedger is what Credit needs of a ledger.
type CreditLedger interface {
	Grant(ctx context.Context, req ledger.GrantRequest) (ledger.GrantResult, error)
	Balance(ctx context.Context, accountID string) (ledger.Balance, error)
}

// Credit grants (kind KindGrant: credits from 1) or adjusts (KindAdjustment: credits not 0,
// reason required) an account's credits of mode ("live" or "test"; "" is live). A grant of live
// credits may expire (expires; zero: never): what is left of it then leaves the balance. A
// reference already used by the account credits nothing: the result has Repeated set.
func Credit(ctx context.Context, store CreditLedger, id string, kind ledger.EntryKind, mode string, credits int64, reference, reason string, expires time.Time) (ledger.Mode, ledger.GrantResult, error) {
	switch kind {
	case ledger.KindGrant:
		if credits <= 0 || credits > maxCreditsPerCall {
			return "", ledger.GrantResult{}, badRequest("credits: a grant is a whole number from 1 to %d; use adjust to remove credits", maxCreditsPerCall)
		}
	case ledger.KindAdjustment:
		if credits == 0 || credits > maxCreditsPerCall || credits < -maxCreditsPerCall {
			return "", ledger.GrantResult{}, badRequest("credits: an adjustment is a non-zero whole number from -%d to %d", maxCreditsPerCall, maxCreditsPerCall)
		}
		if strings.TrimSpace(reason) == "" {
			return "", ledger.GrantResult{}, badRequest("reason is required for an adjustment (it stays in the ledger)")
		}
	default:
		return "", ledger.GrantResult{}, badRequest("kind %q is neither a grant nor an adjustment", kind)
	}
	m, err := parseMode(mode)
	if err != nil {
		return "", ledger.GrantResult{}, err
	}
	if !expires.IsZero() && (kind != ledger.KindGrant || m != ledger.Live) {
		return "", ledger.GrantResult{}, badRequest("expires: only a grant of live credits may expire")
	}
	res, err := store.Grant(ctx, ledger.GrantRequest{
		AccountID: id, Mode: m, Kind: kind, Credits: credits,
		Reference: strings.TrimSpace(reference), Reason: strings.TrimSpace(reason), Expires: expires,
	})
	if errors.Is(err, ledger.ErrInvalidArgument) && !expires.IsZero() {
		return m, ledger.GrantResult{}, badRequest("expires: %s is not in the future", expires.UTC().Format(time.RFC3339))
	}
	if err != nil {
		if errors.Is(err, ledger.ErrInsufficientCredits) {
			msg := fmt.Sprintf("refused: removing %d %s credits would take account %s below zero", -credits, m, id)
			if bal, berr := store.Balance(ctx, id); berr == nil {
				msg += fmt.Sprintf(" (balance %d, available %d)", byMode(m, bal.Balance, bal.TestBalance), byMode(m, bal.Available, bal.TestAvailable))
			}
			return m, ledger.GrantResult{}, caddy.APIError{HTTPStatus: http.StatusConflict, Err: errors.New(msg)}
		}
		if errors.Is(err, ledger.ErrOutcomeUnknown) {
			return m, ledger.GrantResult{}, caddy.APIError{HTTPStatus: http.StatusServiceUnavailable,
				Err: errors.New(outcomeUnknownMessage(kind, strings.TrimSpace(reference) != ""))}
		}
		return m, ledger.GrantResult{}, accountError(err, id, "crediting account %s", id)
	}
	return m, res, nil
}

// outcomeUnknownPrefix begins the message of a write whose outcome is unknown: the CLI knows
// it by it and exits with its own code.
const outcomeUnknownPrefix = "the outcome is unknown"

// outcomeUnknownMessage says that a grant or an adjustment may have been made, and whether a
// retry is safe: with the same reference it is (a reference credits once), without one it may
// credit twice.
func outcomeUnknownMessage(kind ledger.EntryKind, withReference bool) string {
	what := "grant"
	if kind == ledger.KindAdjustment {
		what = "adjustment"
	}
	if withReference {
		return outcomeUnknownPrefix + ": the " + what + " may have been applied; retrying with the same --reference is safe (it is applied once)"
	}
	return outcomeUnknownPrefix + ": the " + what + " may have been applied; look at the account's history (caddy textgen history) " +
		"before trying again: without a --reference a retry may apply it twice"
}

// SetStatus enables or disables an account.
func SetStatus(ctx context.Context, store ledger.Accounts, id string, status ledger.AccountStatus) (ledger.Account, error) {
	acct, err := store.SetAccountStatus(ctx, id, status)
	if err != nil {
		return ledger.Account{}, accountError(err, id, "setting account %s %s", id, status)
	}
	return acct, nil
}

// Refund refunds amountCents (0: what is left) of the purchase reference through Stripe's API,
// asking My Account of the ledger, which holds the Stripe key; the ledger takes the credits off
// through the path of Stripe's refund events, once, by the refund's id (so the event that
// follows changes nothing).
func Refund(ctx context.Context, store ledger.Maintenance, reference string, amountCents int64, reason string) (ledger.ReversalResult, error) {
	switch reason {
	case "", "duplicate", "fraudulent", "requested_by_customer":
	default:
		return ledger.ReversalResult{}, badRequest("reason: %q is not one of duplicate, fraudulent, requested_by_customer", reason)
	}
	if amountCents < 0 {
		return ledger.ReversalResult{}, badRequest("amount_cents: %d is negative; give the cents to refund, or 0 for all that is left", amountCents)
	}
	rf := textgenapp.RefunderFor(store)
	if rf == nil {
		return ledger.ReversalResult{}, caddy.APIError{HTTPStatus: http.StatusConflict,
			Err: errors.New("no textgen_account with Stripe serves this ledger: a refund needs its Stripe key (refund in Stripe's dashboard instead: the ledger follows its event)")}
	}
	res, err := rf.Refund(ctx, reference, amountCents, reason)
	if errors.Is(err, textgenapp.ErrRefund) {
		return ledger.ReversalResult{}, caddy.APIError{HTTPStatus: http.StatusConflict, Err: err}
	}
	if err != nil {
		return ledger.ReversalResult{}, ledgerError(err, "refunding %s", reference)
	}
	return res, nil
}

// DropMail gives up on a queued e-mail: no sender tries it again.
func DropMail(ctx context.Context, store ledger.Mail, id string) error {
	if err := store.DropMail(ctx, id); err != nil {
		return ledgerError(err, "dropping e-mail %s", id)
	}
	return nil
}
