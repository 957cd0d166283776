package ledger

import "time"

// The values the Store API takes and returns, the same for every engine. How an engine stores
// them is its own affair (Badger: JSON records under the keys of badgerledger/prefix.go).

// Mode separates live credits (paid, used by live keys) from test credits (free, used by test keys).
type Mode string

const (
	Live Mode = "live"
	Test Mode = "test"
)

// AccountStatus is the operator-controlled state of an account.
type AccountStatus string

const (
	StatusActive   AccountStatus = "active"
	StatusDisabled AccountStatus = "disabled"
)

// Account is one customer of the service.
type Account struct {
	ID      string        `json:"id"`
	Email   string        `json:"email"`
	Status  AccountStatus `json:"status"`
	Created time.Time     `json:"created"`
	// Unverified is set by sign-up until the owner follows the link sent to the address
	// (Mail.SetEmailVerified); accounts the operator created are not.
	Unverified bool `json:"unverified,omitempty"`
	// LowBalanceAlert is the number of available live credits below which the owner gets an
	// e-mail (0: none); LowBalanceNotified is set once that e-mail is queued and cleared when
	// the credits are back at or above it, so that one crossing sends one e-mail.
	LowBalanceAlert    int64 `json:"low_balance_alert,omitempty"`
	LowBalanceNotified bool  `json:"low_balance_notified,omitempty"`
}

// Key is the stored (public) part of an API key. The full key is never stored.
type Key struct {
	ID        string    `json:"id"`
	AccountID string    `json:"account_id"`
	Mode      Mode      `json:"mode"`
	Name      string    `json:"name"`
	Prefix    string    `json:"prefix"` // "tg_live_" or "tg_test_"
	Last4     string    `json:"last4"`
	Created   time.Time `json:"created"`
	LastUsed  time.Time `json:"last_used,omitzero"`
	Expires   time.Time `json:"expires,omitzero"`
	Revoked   time.Time `json:"revoked,omitzero"`
	// MemberID is the member of an organisation who made the key (members.go); "" for the
	// account's own keys.
	MemberID string `json:"member_id,omitempty"`
	// KeyLimits are what the key may spend and do (keylimits.go).
	KeyLimits
	// Usage is what the key has spent, as of its last hold (keylimits.go).
	Usage KeyUsage `json:"usage"`
	// Rolled is when the key's secret was last replaced (Keys.RollKey); the previous secret,
	// whose last 4 characters are PreviousLast4, works until GraceUntil.
	Rolled        time.Time `json:"rolled,omitzero"`
	PreviousLast4 string    `json:"previous_last4,omitempty"`
	GraceUntil    time.Time `json:"grace_until,omitzero"`
}

// Balance is the credit state of one account.
type Balance struct {
	AccountID string `json:"account_id"`
	// Balance is the sum of the account's live entries; Available is Balance minus open live holds.
	Balance   int64 `json:"balance"`
	Available int64 `json:"available"`
	// TestBalance / TestAvailable are the same for the test credits used by test keys.
	TestBalance   int64 `json:"test_balance"`
	TestAvailable int64 `json:"test_available"`
	// Expiring is what of the live balance expires, and when, soonest first (expiry.go); empty
	// when no credits expire.
	Expiring []ExpiringCredits `json:"expiring,omitempty"`
}

// EntryKind names what a ledger entry records.
type EntryKind string

const (
	KindPurchase   EntryKind = "purchase"
	KindGrant      EntryKind = "grant"
	KindHold       EntryKind = "hold"
	KindSettle     EntryKind = "settle"
	KindVoid       EntryKind = "void"
	KindAdjustment EntryKind = "adjustment"
)

// Entry is one immutable line of an account's ledger.
//
// Amount is the change to the balance (grant/purchase/adjustment: +N or -N; settle: -1;
// hold and void: 0, because holds change only Available). BalanceAfter and AvailableAfter
// are the account's figures (for Mode) right after the entry.
type Entry struct {
	Seq            uint64    `json:"seq"`
	AccountID      string    `json:"account_id"`
	Kind           EntryKind `json:"kind"`
	Mode           Mode      `json:"mode"`
	Amount         int64     `json:"amount"`
	BalanceAfter   int64     `json:"balance_after"`
	AvailableAfter int64     `json:"available_after"`
	RequestID      string    `json:"request_id,omitempty"`
	KeyID          string    `json:"key_id,omitempty"`
	Tool           string    `json:"tool,omitempty"`
	Reference      string    `json:"reference,omitempty"` // payment/grant reference
	Reason         string    `json:"reason,omitempty"`    // adjustment or void reason
	AmountCents    int64     `json:"amount_cents,omitempty"`
	Currency       string    `json:"currency,omitempty"`
	// Credits is, on a hold and on the settle or void that resolves it, the credits the hold
	// reserved (the tool's price when it was held); 0 on entries of a ledger written before
	// prices existed, whose holds all reserved one (HoldCredits).
	Credits int64     `json:"credits,omitempty"`
	Time    time.Time `json:"time"`
}

// HoldCredits is what a hold, settle or void entry's hold reserved: Credits, or one for an
// entry written before tools had prices.
func (e Entry) HoldCredits() int64 { return HeldCredits(e.Credits) }

// HeldCredits is a hold's credits as stored: one where none are stored (a hold written before
// tools had prices, or a HoldRequest that names none).
func HeldCredits(c int64) int64 { return max(c, 1) }

// MaxHoldCredits bounds one hold's price.
const MaxHoldCredits = 1_000_000

// HoldRequest reserves the credits of one generation request.
type HoldRequest struct {
	AccountID string
	Mode      Mode
	RequestID string // unique per request; a second Hold with the same id is a no-op
	KeyID     string
	Tool      string
	// Credits is the request's price, what the hold reserves and a settle charges: 0 is one
	// credit (HeldCredits), at most MaxHoldCredits.
	Credits int64
	// TTL is how long the hold may stay open before it expires; 0: Options.HoldTTL. Callers that
	// share one store with different generation limits each pass their own.
	TTL time.Duration
	// NewID says that RequestID was made for this call from enough random bits that no hold of
	// it can exist from before: a store may then skip looking for an earlier hold of it on disk
	// (a hold of it made in this process is still found, so a repeated call stays a no-op).
	// Set it only for an id the caller just made (the generate handler's request id).
	NewID bool
}

// DefaultHoldTTL is how long a hold may stay open when neither the request (HoldRequest.TTL)
// nor the store's options say: a few minutes past the longest generation the handler allows.
// Every engine uses it, so that a configuration means the same on each.
const DefaultHoldTTL = 15 * time.Minute

// The defaults of every engine's background work (Options and PostgresOptions): how often the
// sweep voids expired holds, and how often keys' last-use times noted in memory are written.
const (
	DefaultSweepInterval         = 30 * time.Second
	DefaultLastUsedFlushInterval = time.Minute
)

// HoldState is the outcome of a hold.
type HoldState string

const (
	HoldOpen    HoldState = "open"
	HoldSettled HoldState = "settled"
	HoldVoided  HoldState = "voided"
)

// HoldResult reports the state of a hold after Hold, Settle or Void.
type HoldResult struct {
	RequestID string    `json:"request_id"`
	State     HoldState `json:"state"`
	// Available is the account's available credits (for the hold's Mode) right after the call.
	Available int64 `json:"available"`
	// Credits is what the hold reserved (its price when it was made), what a settle charged.
	Credits int64 `json:"credits"`
	// Repeated is true when the call was a no-op because the request id had been handled already;
	// State then reports the first outcome.
	Repeated bool `json:"repeated,omitempty"`
}

// HoldInfo is one hold as GetHold reports it.
type HoldInfo struct {
	AccountID string    `json:"account_id"`
	RequestID string    `json:"request_id"`
	Mode      Mode      `json:"mode"`
	State     HoldState `json:"state"`
	KeyID     string    `json:"key_id,omitempty"`
	Tool      string    `json:"tool,omitempty"`
	// Credits is what the hold reserved, and what its settle charged.
	Credits  int64     `json:"credits"`
	Created  time.Time `json:"created"`
	Resolved time.Time `json:"resolved,omitzero"`
	Reason   string    `json:"reason,omitempty"`
}

// GrantRequest adds (or, for adjustments, adds or removes) credits.
type GrantRequest struct {
	AccountID string
	Mode      Mode
	Kind      EntryKind // KindGrant, KindPurchase or KindAdjustment
	Credits   int64     // > 0 for grant/purchase; non-zero for adjustment
	// Reference makes the grant idempotent: the same (account, reference) never credits twice.
	// Required for purchases; optional for grants and adjustments.
	Reference   string
	Reason      string
	AmountCents int64
	Currency    string
	// Expires is when what is left of the credits expires (expiry.go): live grants and
	// purchases only, after the store's clock. Zero: never.
	Expires time.Time
}

// GrantResult reports a grant. Repeated is true when Reference had been used already;
// nothing was credited then, and Entry is the first grant's entry.
type GrantResult struct {
	Entry    Entry   `json:"entry"`
	Balance  Balance `json:"balance"`
	Repeated bool    `json:"repeated,omitempty"`
}

// IdempotencyRecord remembers the outcome of a generate request sent with an Idempotency-Key.
type IdempotencyRecord struct {
	AccountID   string    `json:"account_id"`
	Key         string    `json:"key"`
	RequestID   string    `json:"request_id"`
	Fingerprint string    `json:"fingerprint"` // hash of the request body, to detect reuse with another body
	Status      int       `json:"status"`      // 0 while in progress
	Created     time.Time `json:"created"`
	// HoldTTL is how long the record may stay in progress before a new request may take the key
	// over (its process died and its hold expired); 0: Options.HoldTTL. Pass the TTL of the
	// request's hold.
	HoldTTL time.Duration `json:"hold_ttl,omitempty"`
}

// Page asks for one page of a listing. Cursor is the opaque NextCursor of the previous page.
type Page struct {
	Cursor string
	Limit  int // default 50, at most 1000
}

// Problem is one finding of Verify.
type Problem struct {
	AccountID string `json:"account_id"`
	Kind      string `json:"kind"` // "balance_mismatch", "negative_balance", "negative_available", "expired_open_hold", ...
	Detail    string `json:"detail"`
}

// VerifyReport is the result of Verify.
type VerifyReport struct {
	OK       bool      `json:"ok"`
	Accounts int       `json:"accounts"`
	Entries  int       `json:"entries"`
	Problems []Problem `json:"problems"`
}

// UsageRow is one line of a usage summary: settled requests of one tool on one day (UTC).
type UsageRow struct {
	Day  string `json:"day"` // YYYY-MM-DD
	Tool string `json:"tool"`
	Mode Mode   `json:"mode"`
	// KeyID is the API key of the row's requests, with UsageQuery.ByKey; "" otherwise.
	KeyID    string `json:"key_id,omitempty"`
	Requests int64  `json:"requests"` // holds opened
	Settled  int64  `json:"settled"`  // holds settled (charged)
	Voided   int64  `json:"voided"`
	Credits  int64  `json:"credits"` // credits the settles charged
}

// UsageQuery selects a usage summary; AccountID empty means all accounts.
type UsageQuery struct {
	AccountID string
	From, To  time.Time // zero = unbounded
	// ByKey splits each day's and tool's row by API key (UsageRow.KeyID).
	ByKey bool
}

// MaxSessionTTL bounds CreateSession's ttl.
const MaxSessionTTL = 30 * 24 * time.Hour

// Session is a logged-in browser session of the account area. The token that names it is
// given out once, by CreateSession; only its SHA-256 digest is stored.
type Session struct {
	// ID is a short public name of the session for logs (a prefix of the token's digest).
	ID        string    `json:"id"`
	AccountID string    `json:"account_id"`
	Created   time.Time `json:"created"`
	Expires   time.Time `json:"expires"`
	// CSRFToken is a random secret of this session that every form of the account area must
	// send back (synchronizer token).
	CSRFToken string `json:"csrf_token"`
}
