package ledger

import (
	"context"
	"errors"
	"io"
	"time"
)

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
	Time           time.Time `json:"time"`
}

// HoldRequest reserves one credit for one generation request.
type HoldRequest struct {
	AccountID string
	Mode      Mode
	RequestID string // unique per request; a second Hold with the same id is a no-op
	KeyID     string
	Tool      string
	// TTL is how long the hold may stay open before it expires; 0: Options.HoldTTL. Callers that
	// share one store with different generation limits each pass their own.
	TTL time.Duration
}

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
	// Repeated is true when the call was a no-op because the request id had been handled already;
	// State then reports the first outcome.
	Repeated bool `json:"repeated,omitempty"`
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
	Day      string `json:"day"` // YYYY-MM-DD
	Tool     string `json:"tool"`
	Mode     Mode   `json:"mode"`
	Requests int64  `json:"requests"` // holds opened
	Settled  int64  `json:"settled"`  // credits settled
	Voided   int64  `json:"voided"`
}

// UsageQuery selects a usage summary; AccountID empty means all accounts.
type UsageQuery struct {
	AccountID string
	From, To  time.Time // zero = unbounded
}

// Store is the ledger's Go API. All methods are safe for concurrent use.
type Store interface {
	// Accounts.
	CreateAccount(ctx context.Context, email string) (Account, error)
	GetAccount(ctx context.Context, id string) (Account, error)
	GetAccountByEmail(ctx context.Context, email string) (Account, error)
	ListAccounts(ctx context.Context, p Page) (accounts []Account, nextCursor string, err error)
	SetAccountStatus(ctx context.Context, id string, status AccountStatus) (Account, error)

	// API keys. CreateKey returns the full key once; only its SHA-256 digest is stored.
	CreateKey(ctx context.Context, accountID string, mode Mode, name string, expires time.Time) (fullKey string, k Key, err error)
	ListKeys(ctx context.Context, accountID string) ([]Key, error)
	RevokeKey(ctx context.Context, accountID, keyID string) (Key, error)
	// LookupKey checks the format first (no store access for garbage), then finds the key by its
	// digest in memory. It returns ErrInvalidKey for malformed, unknown, revoked or expired keys,
	// and records the use (LastUsed) in memory; last-use times are flushed to disk periodically.
	LookupKey(ctx context.Context, presented string) (Key, Account, error)

	// Credits.
	Hold(ctx context.Context, req HoldRequest) (HoldResult, error)
	// Reserve is Hold that returns once the credit is reserved, before the hold is on disk; a
	// later Settle or Void of the same request is durable only together with the hold.
	Reserve(ctx context.Context, req HoldRequest) (HoldResult, error)
	Settle(ctx context.Context, accountID, requestID string) (HoldResult, error)
	Void(ctx context.Context, accountID, requestID, reason string) (HoldResult, error)
	Grant(ctx context.Context, req GrantRequest) (GrantResult, error)
	Balance(ctx context.Context, accountID string) (Balance, error)
	History(ctx context.Context, accountID string, p Page) (entries []Entry, nextCursor string, err error)
	Usage(ctx context.Context, q UsageQuery) ([]UsageRow, error)
	Verify(ctx context.Context) (VerifyReport, error)

	// Idempotency-Key records, kept 24 h.
	// BeginIdempotent stores rec if (AccountID, Key) is new, released, or left in progress for
	// longer than the hold TTL (a crash), and returns (rec, true); otherwise it returns the
	// existing record and false. FinishIdempotent records the final status, or releases the
	// key with StatusReleased.
	BeginIdempotent(ctx context.Context, rec IdempotencyRecord) (IdempotencyRecord, bool, error)
	FinishIdempotent(ctx context.Context, accountID, key string, status int) error

	// Passwords and sessions of the self-service account area (auth.go).
	// CreateAccountWithPassword creates an account and its password credential at once (sign-up);
	// the password must pass CheckPasswordPolicy and is stored only as an argon2id hash.
	CreateAccountWithPassword(ctx context.Context, email, password string) (Account, error)
	// SetPassword replaces the account's password and ends all of its sessions.
	SetPassword(ctx context.Context, accountID, password string) error
	// Authenticate returns the account whose email and password match. An unknown email, an
	// account without a password and a wrong password all give ErrInvalidCredentials, after the
	// same amount of hashing work. A disabled account with the right password gives the account
	// and ErrAccountDisabled.
	Authenticate(ctx context.Context, email, password string) (Account, error)
	// CreateSession starts a browser session of ttl for the account. Only the SHA-256 digest of
	// the returned token is stored; the session carries its own CSRF token.
	CreateSession(ctx context.Context, accountID string, ttl time.Duration) (token string, s Session, err error)
	// GetSession returns the session and its account, or ErrInvalidSession for an unknown,
	// ended or expired token.
	GetSession(ctx context.Context, token string) (Session, Account, error)
	// DeleteSession ends a session (log-out). Ending an unknown session is not an error.
	DeleteSession(ctx context.Context, token string) error
	// Purchases returns the account's purchase entries, newest first, at most limit (0: 50).
	Purchases(ctx context.Context, accountID string, limit int) ([]Entry, error)
	// RefillTestCredits grants test credits so that the account's available test credits are
	// upTo (a grant entry with a fresh reference), and returns how many it granted (0 when
	// there were already upTo or more).
	RefillTestCredits(ctx context.Context, accountID string, upTo int64) (credited int64, b Balance, err error)

	// Backup writes an online, consistent backup stream; see Restore for the other way.
	Backup(ctx context.Context, w io.Writer) error
	Close() error
}

// Errors callers can test with errors.Is.
var (
	ErrNotFound            = errors.New("not found")
	ErrInvalidKey          = errors.New("invalid API key")
	ErrInsufficientCredits = errors.New("insufficient credits")
	ErrAccountDisabled     = errors.New("account disabled")
	ErrDuplicateEmail      = errors.New("an account with this email exists")
	ErrAlreadyRevoked      = errors.New("key already revoked")
	ErrInvalidArgument     = errors.New("invalid argument")
	ErrClosed              = errors.New("ledger closed")
	// ErrInvalidCredentials: unknown email, no password set, or wrong password (no hint which).
	ErrInvalidCredentials = errors.New("invalid email or password")
	// ErrWeakPassword is wrapped by *WeakPasswordError, which says why.
	ErrWeakPassword = errors.New("password too weak")
	// ErrInvalidSession: an unknown, ended or expired session token.
	ErrInvalidSession = errors.New("invalid or expired session")
)

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

// WeakPasswordError says why a password was refused. errors.Is(err, ErrWeakPassword) holds.
type WeakPasswordError struct {
	Reason string // a sentence for the user, e.g. "Use at least 10 characters."
}

func (e *WeakPasswordError) Error() string { return "weak password: " + e.Reason }

// Is makes errors.Is(err, ErrWeakPassword) true.
func (e *WeakPasswordError) Is(target error) bool { return target == ErrWeakPassword }
