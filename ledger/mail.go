package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Mail is what e-mail needs of the ledger: a durable outbox that several instances drain
// without sending a message twice, single-use tokens (verify an address, reset a password,
// accept an invitation) stored only as their SHA-256 digest, and the account's address state
// and low-balance alert.
type Mail interface {
	// EnqueueMail stores m (ID, Claim and Attempts are set by the store; NextAttempt zero
	// means now) and returns its id once durable. Sealed is kept as given: the caller
	// encrypts it, since a queued message may carry a live token.
	//
	// Expected errors:
	//   - ErrInvalidArgument: Sealed is empty or over MaxMailSize, Kind is over 32 bytes.
	//   - ErrClosed.
	EnqueueMail(ctx context.Context, m MailMessage) (string, error)

	// ClaimMail leases up to max messages that are due (NextAttempt passed, no live lease)
	// for lease, oldest first, counting an attempt each, and returns them with a fresh
	// Claim. A message leased by one caller is not returned to another until its lease has
	// run out, across instances sharing the store.
	//
	// Expected errors:
	//   - ErrInvalidArgument: lease or max is not positive.
	//   - ErrClosed.
	ClaimMail(ctx context.Context, lease time.Duration, max int) ([]MailMessage, error)

	// MarkMailSent removes the message: it was delivered under claim.
	//
	// Expected errors:
	//   - ErrNotFound: no message id is leased under claim (its lease ran out and another
	//     caller claimed it, or it was marked before).
	//   - ErrClosed.
	MarkMailSent(ctx context.Context, id, claim string) error

	// RetryMail ends the lease of claim and makes the message due again at at, noting why
	// it failed (at most 512 bytes are kept).
	//
	// Expected errors:
	//   - ErrNotFound: no message id is leased under claim.
	//   - ErrClosed.
	RetryMail(ctx context.Context, id, claim string, at time.Time, lastErr string) error

	// ListMail returns the queued messages, oldest first (by Created, then ID), at most limit
	// (0: 50, at most 1000), for an operator to see what waits and why: Attempts, NextAttempt,
	// LastError, and LeaseUntil while a sender holds one. Sealed and Claim are never returned:
	// the one may carry a live link, the other would let the caller resolve a lease it does not
	// hold.
	//
	// Expected errors:
	//   - ErrInvalidArgument: limit is negative.
	//   - ErrClosed; ctx's error.
	ListMail(ctx context.Context, limit int) ([]MailMessage, error)

	// DropMail deletes a queued message once durable: the operator gives up on it (an address
	// that can never receive it). A sender that holds it at that moment may still deliver it; its
	// MarkMailSent or RetryMail then returns ErrNotFound, and nothing is queued again.
	//
	// Expected errors:
	//   - ErrNotFound: no message has id (sent, or dropped before).
	//   - ErrClosed; ErrUnavailable (a store that can write nothing: Badger opened read-only
	//     on a full disk).
	DropMail(ctx context.Context, id string) error

	// CreateToken makes a single-use token of purpose for the account, valid for ttl, and
	// returns it, once. Only its digest is stored.
	//
	// Expected errors:
	//   - ErrInvalidArgument: an unknown purpose, or ttl not in (0, MaxTokenTTL].
	//   - ErrNotFound: no account has accountID.
	//   - ErrClosed.
	CreateToken(ctx context.Context, accountID string, purpose TokenPurpose, ttl time.Duration) (string, error)

	// PeekToken returns the account of a live token of purpose without using it up.
	//
	// Expected errors:
	//   - ErrInvalidToken: malformed, unknown, used, expired, of another purpose, or its
	//     account is gone (no hint which).
	//   - ErrClosed.
	PeekToken(ctx context.Context, purpose TokenPurpose, token string) (Account, error)

	// ConsumeToken uses up a live token of purpose and returns its account. Of calls racing
	// with one token, across instances, exactly one succeeds.
	//
	// Expected errors: those of PeekToken.
	ConsumeToken(ctx context.Context, purpose TokenPurpose, token string) (Account, error)

	// DeleteTokens deletes the account's live tokens of purpose, so that links sent before no
	// longer work (a password change ends the reset links sent before it). Deleting none is
	// not an error.
	//
	// Expected errors:
	//   - ErrClosed.
	DeleteTokens(ctx context.Context, accountID string, purpose TokenPurpose) error

	// SetEmailVerified clears the account's Unverified flag and returns the account.
	//
	// Expected errors:
	//   - ErrNotFound: no account has accountID.
	//   - ErrClosed.
	SetEmailVerified(ctx context.Context, accountID string) (Account, error)

	// SetLowBalanceAlert sets the account's LowBalanceAlert (0: off) and clears
	// LowBalanceNotified, and returns the account.
	//
	// Expected errors:
	//   - ErrInvalidArgument: threshold is negative or over 1,000,000,000.
	//   - ErrNotFound: no account has accountID.
	//   - ErrClosed.
	SetLowBalanceAlert(ctx context.Context, accountID string, threshold int64) (Account, error)

	// NoteLowBalance sets LowBalanceNotified to below and reports whether it changed. Of
	// callers racing to note one crossing, across instances, exactly one sees changed.
	//
	// Expected errors:
	//   - ErrNotFound: no account has accountID.
	//   - ErrClosed.
	NoteLowBalance(ctx context.Context, accountID string, below bool) (changed bool, err error)

	// LowBalanceChanges returns the active accounts with a low-balance alert whose available
	// live credits crossed it since it was last noted: below the alert while LowBalanceNotified
	// is false, or at or above it while it is true. These are exactly the accounts whose flag
	// the alert's sender must note (NoteLowBalance); once it is noted, an account leaves the
	// result. At most limit (0: 50, at most 1000), in account id order. A store that keeps
	// many accounts reads only those with an alert, not every account.
	//
	// Expected errors:
	//   - ErrInvalidArgument: limit is negative.
	//   - ErrClosed; ctx's error.
	LowBalanceChanges(ctx context.Context, limit int) ([]LowBalanceChange, error)
}

// LowBalanceChange is an account whose low-balance alert was crossed (LowBalanceChanges), with
// what the e-mail says: the credits left and the alert (Account.LowBalanceAlert).
type LowBalanceChange struct {
	Account   Account // its LowBalanceAlert and LowBalanceNotified as read with Available
	Available int64   // available live credits: the balance less the open live holds
}

// Below reports whether the credits are below the alert: what NoteLowBalance is to note.
func (c LowBalanceChange) Below() bool { return c.Available < c.Account.LowBalanceAlert }

// ErrInvalidToken: a verify, reset or invite token that is malformed, unknown, used, expired
// or of another purpose.
var ErrInvalidToken = errors.New("invalid or expired link")

// TokenPurpose says what a single-use token may be used for.
type TokenPurpose string

const (
	TokenVerify TokenPurpose = "verify" // confirms the account's address
	TokenReset  TokenPurpose = "reset"  // sets a new password of a customer who forgot it
	TokenInvite TokenPurpose = "invite" // sets the first password of an operator-made account
)

// MaxTokenTTL bounds CreateToken's ttl.
const MaxTokenTTL = 30 * 24 * time.Hour

// MaxMailSize bounds one queued message.
const MaxMailSize = 1 << 20

// MailMessage is one queued e-mail.
type MailMessage struct {
	ID          string    `json:"id"`
	AccountID   string    `json:"account_id,omitempty"`
	Kind        string    `json:"kind,omitempty"` // what it is, for logs: "verify", "reset"...
	Sealed      []byte    `json:"sealed"`         // the message, encrypted by the caller
	Created     time.Time `json:"created"`
	Attempts    int       `json:"attempts"`
	NextAttempt time.Time `json:"next_attempt"`
	Claim       string    `json:"claim,omitempty"` // set by ClaimMail
	LastError   string    `json:"last_error,omitempty"`
	// LeaseUntil is when the lease of the last claim runs out: while it has not, a sender is
	// delivering the message. Zero when it was never claimed or was retried since.
	LeaseUntil time.Time `json:"lease_until,omitzero"`
}

func CheckMail(m MailMessage) error {
	if len(m.Sealed) == 0 || len(m.Sealed) > MaxMailSize {
		return fmt.Errorf("mail of %d bytes: %w", len(m.Sealed), ErrInvalidArgument)
	}
	if len(m.Kind) > 32 {
		return fmt.Errorf("mail kind: %w", ErrInvalidArgument)
	}
	return nil
}

func CheckClaim(lease time.Duration, max int) error {
	if lease <= 0 || max <= 0 {
		return fmt.Errorf("claim of %d for %s: %w", max, lease, ErrInvalidArgument)
	}
	return nil
}

func CheckToken(purpose TokenPurpose, ttl time.Duration) error {
	switch purpose {
	case TokenVerify, TokenReset, TokenInvite:
	default:
		return fmt.Errorf("token purpose %q: %w", purpose, ErrInvalidArgument)
	}
	if ttl <= 0 || ttl > MaxTokenTTL {
		return fmt.Errorf("token ttl %s: %w", ttl, ErrInvalidArgument)
	}
	return nil
}

func CheckThreshold(t int64) error {
	if t < 0 || t > 1_000_000_000 {
		return fmt.Errorf("low balance alert %d: %w", t, ErrInvalidArgument)
	}
	return nil
}

// CheckMailID refuses, before any store access, an id that no message can have: ids are
// NewMailID's, a few dozen bytes.
func CheckMailID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("mail %q: %w", TruncateUTF8(id, 64), ErrNotFound)
	}
	return nil
}

// NewMailID orders queued messages by when they were queued.
func NewMailID(t time.Time) string {
	return fmt.Sprintf("mail_%016x%s", t.UnixNano(), RandomBase62(8))
}

func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
