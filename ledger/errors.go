package ledger

import (
	"errors"
	"fmt"
)

// Errors callers can test with errors.Is. Every engine returns these same values (wrapped with
// context where that helps), so that callers never depend on an engine's own errors. The doc
// comment of each Store method lists the ones it may return.
var (
	// ErrNotFound: the account, key, hold (request id) or idempotency key does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalidKey: a presented API key is malformed, unknown, revoked or expired (no hint which).
	ErrInvalidKey = errors.New("invalid API key")
	// ErrInsufficientCredits: a hold, or a negative adjustment, needs more available credits
	// than the account has. Nothing was written.
	ErrInsufficientCredits = errors.New("insufficient credits")
	// ErrAccountDisabled: the operator disabled the account; it takes no new holds or sessions.
	ErrAccountDisabled = errors.New("account disabled")
	// ErrDuplicateEmail: another account has this email (after normalisation).
	ErrDuplicateEmail = errors.New("an account with this email exists")
	// ErrTooManyKeys: CreateKeyCapped for an account that has its most unrevoked keys.
	ErrTooManyKeys = errors.New("the account has the most API keys allowed")
	// ErrAlreadyRevoked: RevokeKey of a key revoked before.
	ErrAlreadyRevoked = errors.New("key already revoked")
	// ErrInvalidArgument: a malformed or out-of-range argument (mode, request id, email, cursor,
	// page limit, TTL...). The wrapping message names it.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnavailable: the store cannot take new work now, for a reason that passes (its disk is
	// nearly full, its database is unreachable); the wrapping message says which. Nothing was
	// written. Reads, and the resolution of holds already taken, go on where they can.
	ErrUnavailable = errors.New("ledger unavailable")
	// ErrDiskFull wraps ErrUnavailable: the store's disk has less free space than its reserve.
	ErrDiskFull = fmt.Errorf("%w: its disk is nearly full", ErrUnavailable)
	// ErrOutcomeUnknown: a write was handed to the store but it cannot say whether it was made
	// (its commit failed after it may have reached the log, or the caller stopped waiting while
	// it was queued). A write idempotent by reference (a grant with a reference) may be retried
	// with the same reference: it is made at most once.
	ErrOutcomeUnknown = errors.New("the outcome is unknown: the write may have been made")
	// ErrClosed: the store was closed, or is being closed.
	ErrClosed = errors.New("ledger closed")
	// ErrInvalidCredentials: unknown email, no password set, or wrong password (no hint which).
	ErrInvalidCredentials = errors.New("invalid email or password")
	// ErrWeakPassword is wrapped by *WeakPasswordError, which says why.
	ErrWeakPassword = errors.New("password too weak")
	// ErrInvalidSession: an unknown, ended or expired session token.
	ErrInvalidSession = errors.New("invalid or expired session")
	// ErrNotOrganisation: a member change of an account that is not an organisation.
	ErrNotOrganisation = errors.New("the account is not an organisation")
	// ErrAlreadyMember: AddMember of a member, or invitee, of the organisation.
	ErrAlreadyMember = errors.New("already a member of the organisation")
	// ErrNotMember: the account is not a member of the organisation (nor invited, where that
	// counts).
	ErrNotMember = errors.New("not a member of the organisation")
	// ErrLastOwner: the change would leave an organisation without an accepted owner.
	ErrLastOwner = errors.New("the organisation's last owner cannot leave or be demoted")
	// ErrMemberCapReached: a hold of a member whose monthly cap of credits is used up (until
	// MemberCapResets). Nothing was written.
	ErrMemberCapReached = errors.New("the member's monthly credit cap is reached")
	// ErrCodeUsed: an operator's second-factor code of a time step at or before one already used.
	ErrCodeUsed = errors.New("second-factor code already used")
)

// WeakPasswordError says why a password was refused. errors.Is(err, ErrWeakPassword) holds.
type WeakPasswordError struct {
	Reason string // a sentence for the user, e.g. "Use at least 10 characters."
}

func (e *WeakPasswordError) Error() string { return "weak password: " + e.Reason }

// Is makes errors.Is(err, ErrWeakPassword) true.
func (e *WeakPasswordError) Is(target error) bool { return target == ErrWeakPassword }
