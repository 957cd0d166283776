package operator

import (
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// The JSON bodies of the admin API. The CLI decodes the same types, so a field added here
// reaches both.

type createAccountRequest struct {
	Email string `json:"email"`
	// TestCredits are the free test credits the account starts with (what test keys draw on).
	// Default (absent): defaultTestCredits, as a sign-up in My Account gets by default.
	TestCredits *int64 `json:"test_credits,omitempty"`
}

// defaultTestCredits is what an account the operator creates starts with: the default of My
// Account's test_credits, so that its test keys work at once, whichever way it was made.
const defaultTestCredits = 50

type accountList struct {
	Accounts   []ledger.Account `json:"accounts"`
	NextCursor string           `json:"next_cursor"`
}

// accountDetail is an account with what an operator looks at next: its credits and keys, and
// whether a payment of it is disputed.
type accountDetail struct {
	ledger.Account
	Credits ledger.Balance `json:"credits"`
	Keys    []keyView      `json:"keys"`
	// Disputed is true while the account has a dispute (chargeback) that is open or was lost;
	// Disputes are all of its disputes, won ones too, last changed first, each with its id,
	// purchase, amount, credits taken off, status and the bank's reason.
	Disputed bool              `json:"disputed"`
	Disputes []ledger.Reversal `json:"disputes"`
}

// keyView is what the admin API shows of a key. It is built field by field so that nothing but
// the public parts (never a digest) can reach a response.
type keyView struct {
	ID        string      `json:"id"`
	AccountID string      `json:"account_id"`
	Mode      ledger.Mode `json:"mode"`
	Name      string      `json:"name"`
	// Hint is how the key is shown after its creation: prefix, an ellipsis, the last 4 characters.
	Hint          string    `json:"hint"`
	Prefix        string    `json:"prefix"`
	Last4         string    `json:"last4"`
	Status        string    `json:"status"` // active, revoked or expired
	Created       time.Time `json:"created"`
	LastUsed      time.Time `json:"last_used,omitzero"`
	Expires       time.Time `json:"expires,omitzero"`
	Revoked       bool      `json:"revoked"`
	RevokedAt     time.Time `json:"revoked_at,omitzero"`
	keyLimitsView           // key_limits.go
	// MemberID is the organisation's member who made the key; empty for the account's own.
	MemberID string `json:"member_id,omitempty"`
}

type createKeyRequest struct {
	Mode string `json:"mode"` // live (default) or test
	Name string `json:"name"`
	// Expires is an RFC 3339 time or a duration from now ("720h", "90d"); empty: never.
	Expires string `json:"expires"`
}

// createdKey is the only response that ever carries a full key.
type createdKey struct {
	Key string `json:"key"`
	keyView
}

type keyList struct {
	Keys []keyView `json:"keys"`
}

type grantRequest struct {
	Credits   int64  `json:"credits"`
	Reference string `json:"reference"`
	Mode      string `json:"mode"`
	Reason    string `json:"reason"`
	// Expires is when what is left of a grant's live credits expires, RFC 3339; "": never.
	Expires string `json:"expires,omitempty"`
}

// creditsResult answers a grant or an adjustment.
type creditsResult struct {
	AccountID string           `json:"account_id"`
	Kind      ledger.EntryKind `json:"kind"`
	Mode      ledger.Mode      `json:"mode"`
	// Credited is what this call changed: the requested credits, or 0 when Repeated.
	Credited  int64  `json:"credited"`
	Reference string `json:"reference,omitempty"`
	// Repeated: the reference had been used already, nothing was credited, Entry is the first one.
	Repeated bool `json:"repeated"`
	// Balance and Available are the figures of Mode right after the call.
	Balance   int64        `json:"balance"`
	Available int64        `json:"available"`
	Entry     ledger.Entry `json:"entry"`
	// Credits has the account's live and test figures.
	Credits ledger.Balance `json:"credits"`
}

type entryList struct {
	AccountID  string         `json:"account_id"`
	Entries    []ledger.Entry `json:"entries"`
	NextCursor string         `json:"next_cursor"`
}

// usageSum is one line of a usage total.
type usageSum struct {
	Day      string      `json:"day,omitempty"`
	Tool     string      `json:"tool,omitempty"`
	Mode     ledger.Mode `json:"mode"`
	Requests int64       `json:"requests"`
	Settled  int64       `json:"settled"`
	Voided   int64       `json:"voided"`
	Credits  int64       `json:"credits"` // what the settles charged
}

// usageReport is the usage summary: the ledger's rows (per day, tool and mode) and their sums
// per tool, per day and per mode. Live and test are never added together: test credits are free.
type usageReport struct {
	AccountID string            `json:"account_id,omitempty"`
	From      string            `json:"from,omitempty"`
	To        string            `json:"to,omitempty"`
	Rows      []ledger.UsageRow `json:"rows"`
	ByTool    []usageSum        `json:"by_tool"`
	ByDay     []usageSum        `json:"by_day"`
	Total     []usageSum        `json:"total"`
}

// backupChecksumTrailer carries the SHA-256 of the backup stream, so the client can tell a
// complete download from one cut short.
const backupChecksumTrailer = "X-Textgen-Backup-Sha256"

// paymentList answers GET /textgen/payments: newest first.
type paymentList struct {
	Payments []ledger.UnmatchedPayment `json:"payments"`
	// OpenOnly: only the payments not resolved yet are listed (the default; ?all=true lists all).
	OpenOnly bool `json:"open_only"`
	// Reversals are the refunds and disputes, last changed first (as many as limit): money that
	// flowed back, each applied to the ledger once.
	Reversals []ledger.Reversal `json:"reversals"`
}

// refundRequest asks for a refund of a purchase (POST /textgen/payments/{reference}/refund).
type refundRequest struct {
	// AmountCents is what to refund; 0: all that is left.
	AmountCents int64 `json:"amount_cents"`
	// Reason is Stripe's: duplicate, fraudulent or requested_by_customer; "" for none.
	Reason string `json:"reason"`
}

type resolvePaymentRequest struct {
	Note string `json:"note"`
}

// resolvedPayment answers a resolve. Repeated: it was resolved before, and Payment carries that
// first resolution.
type resolvedPayment struct {
	Payment  ledger.UnmatchedPayment `json:"payment"`
	Repeated bool                    `json:"repeated"`
}

// mailView is what the admin API shows of a queued e-mail. It is built field by field so that
// the sealed message (which may carry a live link) and the sender's claim never reach a
// response.
type mailView struct {
	ID        string `json:"id"`
	AccountID string `json:"account_id,omitempty"`
	Kind      string `json:"kind,omitempty"` // verify, reset, invite, low_balance
	// Created is when it was queued.
	Created time.Time `json:"created"`
	// Attempts counts the deliveries begun; NextAttempt is when the next one is due, LastError
	// why the last one failed.
	Attempts    int       `json:"attempts"`
	NextAttempt time.Time `json:"next_attempt"`
	LastError   string    `json:"last_error,omitempty"`
	// Sending: a sender holds it right now (its lease has not run out).
	Sending bool `json:"sending"`
}

// mailList answers GET /textgen/mail: the queued e-mail, oldest first.
type mailList struct {
	Messages []mailView `json:"messages"`
}

// droppedMail answers POST /textgen/mail/{id}/drop.
type droppedMail struct {
	Dropped string `json:"dropped"`
}
