package ledger

import (
	"context"
	"io"
	"time"
)

// The ledger's Go API, one interface per role, so that a caller can ask for only what it uses
// and an engine can be written, reviewed and tested one role at a time. Store embeds them all.
//
// Every method is safe for concurrent use. Under each method, "Expected errors" lists the
// sentinel values (errors.go) it may return, wrapped or not: test them with errors.Is. Any
// other error is not part of normal operation: a failed disk write or query, a corrupt record.
// After a failed commit an engine may refuse every later call with that error until it is
// reopened (Badger does: its memory may be ahead of its disk).
//
// Calls that start new work (CreateAccount, CreateAccountWithPassword, SetPassword,
// CreateSession, CreateKey, CreateKeyCapped, Hold, Reserve, Grant, RefillTestCredits,
// BeginIdempotent, CreateCode, Redeem) may also return ErrUnavailable while the store cannot take
// new work (see Maintenance.Health); nothing was written then, and the caller may retry later.
// Calls that finish work already begun (Settle, Void, FinishIdempotent) or protect an account
// (RevokeKey, RemoveMember, SetAccountStatus, DeleteSession, DisableCode) go on while they can.
//
// Calls that change credits (Hold, Reserve, Settle, Void, Grant, RefillTestCredits, Redeem) do
// not give up when ctx is canceled: a handler voids a hold after its client went away, with a
// context that is already done. Long reads (History, Usage, Purchases, Verify) do honour ctx
// and may return its error.

// Accounts are the service's customers, created by the operator or by sign-up
// (Credentials.CreateAccountWithPassword).
type Accounts interface {
	// CreateAccount creates an active account with zero balances. The email is trimmed and
	// lower-cased, and must be unique after that.
	//
	// Expected errors:
	//   - ErrInvalidArgument: email is not a plain address (no display name, one @, no spaces).
	//   - ErrDuplicateEmail: an account has this email.
	//   - ErrClosed.
	CreateAccount(ctx context.Context, email string) (Account, error)

	// GetAccount returns the account with id.
	//
	// Expected errors:
	//   - ErrNotFound: no account has id.
	//   - ErrClosed.
	GetAccount(ctx context.Context, id string) (Account, error)

	// GetAccountByEmail returns the account with email (trimmed and lower-cased first).
	//
	// Expected errors:
	//   - ErrNotFound: no account has this email.
	//   - ErrClosed.
	GetAccountByEmail(ctx context.Context, email string) (Account, error)

	// ListAccounts lists accounts in the order of their e-mail addresses (byte order), p.Limit
	// at a time (0: 50, at most 1000). nextCursor is "" on the last page.
	//
	// Expected errors:
	//   - ErrInvalidArgument: a cursor this store did not make, or a negative limit.
	//   - ErrClosed.
	ListAccounts(ctx context.Context, p Page) (accounts []Account, nextCursor string, err error)

	// SetAccountStatus enables or disables an account and returns it. Disabling takes effect on
	// the next call: no new holds, refills, log-ins or sessions; open holds can still be settled or
	// voided, keys still resolve (so the handler can answer 403), grants still credit. Setting
	// the status it has already changes nothing.
	//
	// Expected errors:
	//   - ErrInvalidArgument: status is neither StatusActive nor StatusDisabled.
	//   - ErrNotFound: no account has id.
	//   - ErrClosed.
	SetAccountStatus(ctx context.Context, id string, status AccountStatus) (Account, error)
}

// Keys are API keys. A key is "tg_live_" or "tg_test_", 30 random Base62 characters and a
// 6-character checksum (apikey.go). Only its SHA-256 digest is stored, never the key.
type Keys interface {
	// CreateKey makes a key of mode for the account and returns it in full, once, with its
	// stored public part. expires is zero for a key that never expires. The key is usable
	// (LookupKey finds it) once CreateKey has returned.
	//
	// Expected errors:
	//   - ErrInvalidArgument: mode is not Live or Test, name is not UTF-8 or longer than 100
	//     bytes, or expires is not in the future.
	//   - ErrNotFound: no account has accountID.
	//   - ErrClosed.
	CreateKey(ctx context.Context, accountID string, mode Mode, name string, expires time.Time) (fullKey string, k Key, err error)
	// CreateKeyCapped is CreateKey for an account that may have at most maxActive keys that are
	// not revoked (maxActive <= 0: no cap). Counting the account's keys and creating the new
	// one are one step, so keys created all at once never exceed the cap.
	//
	// Expected errors: those of CreateKey, and ErrTooManyKeys when the account already has
	// maxActive unrevoked keys.
	CreateKeyCapped(ctx context.Context, accountID string, mode Mode, name string, expires time.Time, maxActive int) (fullKey string, k Key, err error)

	// ListKeys returns the account's keys, revoked ones included, oldest first, each with its
	// last use.
	//
	// Expected errors:
	//   - ErrNotFound: no account has accountID.
	//   - ErrClosed.
	ListKeys(ctx context.Context, accountID string) ([]Key, error)

	// RevokeKey revokes the account's key at once: the next LookupKey of it fails.
	//
	// Expected errors:
	//   - ErrNotFound: no account has accountID, or it has no key keyID.
	//   - ErrAlreadyRevoked: the key was revoked before; the key is returned with the error.
	//   - ErrClosed.
	RevokeKey(ctx context.Context, accountID, keyID string) (Key, error)

	// UpdateKey replaces the key's name, expiry and limits (keylimits.go) with set and returns
	// the key. Its usage is kept. The next Hold and LookupKey, on any instance, use them.
	//
	// Expected errors:
	//   - ErrInvalidArgument: a name or note too long or not UTF-8, a new expiry not in the
	//     future, a negative budget, a tool or range that is malformed, too many of them.
	//   - ErrNotFound: no account has accountID, or it has no key keyID.
	//   - ErrAlreadyRevoked: the key is revoked.
	//   - ErrClosed.
	UpdateKey(ctx context.Context, accountID, keyID string, set KeySettings) (Key, error)

	// RollKey gives the key a new secret, returned in full once, for the same key id: its
	// limits, usage and expiry are kept. The previous secret keeps working until grace (0 to
	// 7 days) has passed, on every instance; a secret that was already in its grace period
	// (a second roll within it) stops at once.
	//
	// Expected errors:
	//   - ErrInvalidArgument: grace is negative or longer than 7 days.
	//   - ErrNotFound: no account has accountID, or it has no key keyID.
	//   - ErrAlreadyRevoked: the key is revoked.
	//   - ErrClosed.
	RollKey(ctx context.Context, accountID, keyID string, grace time.Duration) (fullKey string, k Key, err error)

	// LookupKey returns the key presented by a client and its account (whatever the account's
	// status: the caller checks it). It checks the format first (CheckKeyFormat), so garbage
	// costs no store access. It does not record a use: Hold does, so that a request refused
	// before it was charged (no credit, a spent budget, a limit) leaves Key.LastUsed as it was.
	//
	// Expected errors:
	//   - ErrInvalidKey: the key is malformed, unknown or revoked, or a rolled key's previous
	//     secret past its grace period (no hint which).
	//   - ErrKeyExpired: the key is known and its expiry has passed.
	//   - ErrClosed.
	LookupKey(ctx context.Context, presented string) (Key, Account, error)

	// LookupKeyBalance is LookupKey that also returns the account's credits as Balance would,
	// in one step (PostgreSQL: one query), for a request that needs both before it can start.
	//
	// Expected errors: those of LookupKey.
	LookupKeyBalance(ctx context.Context, presented string) (Key, Account, Balance, error)
}

// Credits are the accounts' balances: holds that reserve one credit per generation request and
// are settled (charged) or voided exactly once, grants and purchases that add credits, and the
// entries that record every change (see the invariants in doc.go).
type Credits interface {
	// Hold reserves one credit of req.Mode for req.RequestID and returns once the hold is
	// durable. A request id is held at most once per account: a repeated Hold reports the
	// hold's current state with Repeated set and changes nothing. An open hold is voided with
	// reason "expired" once req.TTL (0: the store's default hold TTL) has passed. A new hold
	// records the use of req.KeyID: its Key.LastUsed becomes the hold's time (a refused hold
	// records nothing). Last-use times may reach the disk later than the hold (they are flushed
	// every LastUsedFlushInterval and at Close).
	//
	// Expected errors:
	//   - ErrInvalidArgument: mode is not Live or Test; the request id is empty or longer than
	//     128 bytes; the key id or tool is longer than 64 bytes; a string is not UTF-8; TTL is
	//     negative.
	//   - ErrNotFound: no account has req.AccountID.
	//   - ErrAccountDisabled: the account is disabled (a repeated request id is still reported).
	//   - ErrInsufficientCredits: no credit of req.Mode is available; nothing was written.
	//   - ErrKeyBudgetExhausted (a *KeyBudgetError): req.KeyID, a key of the account, has
	//     spent one of its budgets (keylimits.go); nothing was written.
	//   - ErrClosed.
	Hold(ctx context.Context, req HoldRequest) (HoldResult, error)

	// Reserve is Hold that returns once the credit is reserved, before the hold is durable. A
	// later Settle or Void of the same request is durable only together with the hold, so a
	// crash in between loses the hold, which charges nothing.
	//
	// Expected errors: those of Hold.
	Reserve(ctx context.Context, req HoldRequest) (HoldResult, error)

	// Settle charges the held credit: the balance falls by one (an entry of kind settle, amount
	// -1). A hold resolved before (settled or voided) reports its first outcome with Repeated
	// set and changes nothing. Settling works on a disabled account.
	//
	// Expected errors:
	//   - ErrInvalidArgument: the request id is empty, too long or not UTF-8.
	//   - ErrNotFound: no account has accountID, or it never held requestID.
	//   - ErrClosed.
	Settle(ctx context.Context, accountID, requestID string) (HoldResult, error)

	// SettleDecided is Settle of a charge decided at decided (the request's text was delivered
	// then). A hold that the sweep voided as expired although decided is before its expiry is
	// charged after all, once: an entry of kind settle with reason SettledLateReason, the hold
	// then settled. When the credit the void gave back is no longer available, or decided is
	// not before the expiry, it reports the void with Repeated set, as Settle does.
	//
	// Expected errors: those of Settle.
	SettleDecided(ctx context.Context, accountID, requestID string, decided time.Time) (HoldResult, error)

	// Void releases the held credit without charging it (an entry of kind void, amount 0, with
	// reason). A hold resolved before reports its first outcome with Repeated set.
	//
	// Expected errors:
	//   - ErrInvalidArgument: the request id is empty, too long or not UTF-8, or the reason is
	//     longer than 512 bytes or not UTF-8.
	//   - ErrNotFound: no account has accountID, or it never held requestID.
	//   - ErrClosed.
	Void(ctx context.Context, accountID, requestID, reason string) (HoldResult, error)

	// Grant adds credits (KindGrant, KindPurchase: Credits > 0) or adds or removes them
	// (KindAdjustment: Credits != 0). A Reference is used at most once per account: a repeated
	// one credits nothing and returns the first entry with Repeated set. Purchases need a
	// Reference and are Live only. Grants credit a disabled account too.
	//
	// Expected errors:
	//   - ErrInvalidArgument: a bad mode, kind or number of credits; a purchase without a
	//     reference or of test credits; a negative AmountCents; a reference (256), reason (512)
	//     or currency (8 bytes) too long or not UTF-8.
	//   - ErrNotFound: no account has req.AccountID.
	//   - ErrInsufficientCredits: an adjustment would take available credits below zero.
	//   - ErrOutcomeUnknown: the grant may or may not have been made (its commit failed, or ctx
	//     ended while it waited to be written); a retry with the same Reference makes it once.
	//   - ErrClosed.
	Grant(ctx context.Context, req GrantRequest) (GrantResult, error)

	// Balance returns the account's live and test figures. It may already show a change whose
	// call has not returned yet (Badger applies changes in memory before they are durable).
	//
	// Expected errors:
	//   - ErrNotFound: no account has accountID.
	//   - ErrClosed.
	Balance(ctx context.Context, accountID string) (Balance, error)

	// Purchases returns the account's purchase entries, newest first, at most limit (0: 50, at
	// most 1000).
	//
	// Expected errors:
	//   - ErrInvalidArgument: limit is negative.
	//   - ErrNotFound: no account has accountID.
	//   - ErrClosed; ctx's error.
	Purchases(ctx context.Context, accountID string, limit int) ([]Entry, error)

	// Purchase returns the account's purchase entry whose grant reference is reference (a
	// receipt), however many purchases the account has. A reference used by a grant or an
	// adjustment, or by another account, is not found.
	//
	// Expected errors:
	//   - ErrInvalidArgument: the reference is empty, longer than 256 bytes or not UTF-8.
	//   - ErrNotFound: no account has accountID, or it has no purchase with reference.
	//   - ErrClosed; ctx's error.
	Purchase(ctx context.Context, accountID, reference string) (Entry, error)

	// RefillTestCredits tops the account's available test credits up to upTo with one grant
	// entry (no reference, reason "test credit refill") and returns how many it granted: 0 when
	// there were upTo or more. Concurrent refills never overshoot upTo.
	//
	// Expected errors:
	//   - ErrInvalidArgument: upTo is not positive.
	//   - ErrNotFound: no account has accountID.
	//   - ErrAccountDisabled: the account is disabled.
	//   - ErrClosed.
	RefillTestCredits(ctx context.Context, accountID string, upTo int64) (credited int64, b Balance, err error)

	// GetHold returns the account's hold of requestID, open or resolved: what a request was
	// charged (a receipt). Another account's request id is not found.
	//
	// Expected errors:
	//   - ErrInvalidArgument: the request id is empty, too long or not UTF-8.
	//   - ErrNotFound: no account has accountID, or it never held requestID.
	//   - ErrClosed.
	GetHold(ctx context.Context, accountID, requestID string) (HoldInfo, error)
}

// Idempotency keeps the Idempotency-Key records of generate requests for IdempotencyTTL (24 h),
// so that a client's retry gets the first answer instead of a second charge.
type Idempotency interface {
	// BeginIdempotent stores rec and returns (rec, true) if (rec.AccountID, rec.Key) is new,
	// released (StatusReleased), or still in progress longer than rec.HoldTTL (0: the store's
	// default hold TTL) after rec.Created, which means its request died. Otherwise it returns
	// the existing record and false. rec.Created defaults to now.
	//
	// Expected errors:
	//   - ErrInvalidArgument: the key is empty, longer than 255 bytes or not UTF-8; the request
	//     id (128) or fingerprint (256) is too long or not UTF-8; HoldTTL is negative.
	//   - ErrNotFound: no account has rec.AccountID.
	//   - ErrClosed.
	BeginIdempotent(ctx context.Context, rec IdempotencyRecord) (IdempotencyRecord, bool, error)

	// FinishIdempotent records the final HTTP status (100-599) of the request that began key,
	// or releases the key with StatusReleased.
	//
	// Expected errors:
	//   - ErrInvalidArgument: status is neither an HTTP status nor StatusReleased.
	//   - ErrNotFound: no account has accountID, or it has no live record for key.
	//   - ErrClosed.
	FinishIdempotent(ctx context.Context, accountID, key string, status int) error
}

// Generations keep the text of charged generations for a short window (generations.go), so
// that a client whose stream was cut can fetch or resume it. The caller encrypts every chunk:
// the store keeps only ciphertext and the record's metadata. A record and its chunks are gone
// for every reader once rec.Expires has passed, and deleted by the engine's sweep (at Open and
// every SweepInterval) or by DeleteExpiredGenerations.
type Generations interface {
	// PutGenerations applies puts in order. A put creates or replaces the record of
	// (Record.AccountID, Record.RequestID) and stores Chunks as its chunks number First,
	// First+1, ...; the record's Chunks becomes First+len(Chunks). Chunks before First are kept;
	// a generation has one writer, which numbers its chunks itself. Puts of many generations go
	// in one call so that they share a commit; a reader never sees a put before the ones before
	// it. Every put is checked before any is stored.
	//
	// Expected errors:
	//   - ErrInvalidArgument: a bad request id, mode, state, tool or language (64 bytes), a
	//     negative figure, an empty chunk or one over MaxGenerationChunk, chunks over
	//     MaxGenerationPut in one put, or an expiry that is not in the future.
	//   - ErrNotFound: no account has a put's AccountID (nothing is stored).
	//   - ErrClosed.
	PutGenerations(ctx context.Context, puts ...GenerationPut) error

	// GetGeneration returns the record and its chunks from number from on (0: all).
	//
	// Expected errors:
	//   - ErrInvalidArgument: from is negative.
	//   - ErrNotFound: the account has no such generation, or its window has ended.
	//   - ErrClosed; ctx's error.
	GetGeneration(ctx context.Context, accountID, requestID string, from int) (GenerationRecord, [][]byte, error)

	// DeleteGeneration deletes the record and its chunks at once (a generation that was not
	// charged keeps nothing). Deleting one that does not exist is not an error.
	//
	// Expected errors:
	//   - ErrClosed.
	DeleteGeneration(ctx context.Context, accountID, requestID string) error

	// DeleteExpiredGenerations deletes every generation whose window has ended and returns how
	// many it deleted.
	//
	// Expected errors:
	//   - ErrClosed; ctx's error.
	DeleteExpiredGenerations(ctx context.Context) (int, error)
}

// Credentials are what the self-service account area logs in with: a password per account,
// stored only as an argon2id hash (password.go), and browser sessions, stored only as the
// SHA-256 digest of their token.
type Credentials interface {
	// CreateAccountWithPassword creates an active account and its password credential at once
	// (sign-up): there is never an account that a sign-up created without its password.
	//
	// Expected errors:
	//   - ErrInvalidArgument: email is not a plain address.
	//   - ErrWeakPassword: the password fails CheckPasswordPolicy (a *WeakPasswordError).
	//   - ErrDuplicateEmail: an account has this email.
	//   - ErrClosed.
	CreateAccountWithPassword(ctx context.Context, email, password string) (Account, error)

	// SetPassword replaces the account's password (or sets the first one of an account the
	// operator created) and ends all of its sessions.
	//
	// Expected errors:
	//   - ErrNotFound: no account has accountID.
	//   - ErrWeakPassword: the password fails CheckPasswordPolicy (a *WeakPasswordError).
	//   - ErrClosed.
	SetPassword(ctx context.Context, accountID, password string) error

	// Authenticate returns the account whose email and password match. An unknown email, an
	// account without a password and a wrong password cost the same argon2id work (one hash)
	// and give the same error; a password longer than MaxPasswordLen is refused unhashed.
	//
	// Expected errors:
	//   - ErrInvalidCredentials: unknown email, no password set, or wrong password.
	//   - ErrAccountDisabled: the password is right but the account is disabled; the account
	//     is returned with the error.
	//   - ErrClosed.
	Authenticate(ctx context.Context, email, password string) (Account, error)

	// CreateSession starts a browser session of ttl (at most MaxSessionTTL) for the account and
	// returns its token, once. The session carries its own CSRF token.
	//
	// Expected errors:
	//   - ErrInvalidArgument: ttl is not in (0, MaxSessionTTL].
	//   - ErrNotFound: no account has accountID.
	//   - ErrAccountDisabled: the account is disabled.
	//   - ErrClosed.
	CreateSession(ctx context.Context, accountID string, ttl time.Duration) (token string, s Session, err error)

	// GetSession returns the session of token and its account (whatever its status: the caller
	// checks it). A session ends at its expiry by the ledger clock.
	//
	// Expected errors:
	//   - ErrInvalidSession: the token is malformed, unknown, ended or expired, or its account
	//     is gone.
	//   - ErrClosed.
	GetSession(ctx context.Context, token string) (Session, Account, error)

	// DeleteSession ends the session of token (log-out). Ending an unknown or malformed token's
	// session is not an error.
	//
	// Expected errors:
	//   - ErrClosed.
	DeleteSession(ctx context.Context, token string) error
}

// Reports read the entries back: an account's history and usage summaries. They show durable
// entries only, so a change is listed once its call has returned.
type Reports interface {
	// History returns the account's entries newest first, p.Limit at a time (0: 50, at most
	// 1000). nextCursor is "" on the last page.
	//
	// Expected errors:
	//   - ErrInvalidArgument: a cursor this store did not make, or a negative limit.
	//   - ErrNotFound: no account has accountID.
	//   - ErrClosed; ctx's error.
	History(ctx context.Context, accountID string, p Page) (entries []Entry, nextCursor string, err error)

	// Usage counts holds, settles and voids per UTC day, tool and mode, for q.AccountID or (if
	// empty) every account, of the entries with times in [q.From, q.To) (zero: unbounded),
	// ordered by day, tool and mode.
	//
	// Expected errors:
	//   - ErrNotFound: q.AccountID is set and no account has it.
	//   - ErrClosed; ctx's error.
	Usage(ctx context.Context, q UsageQuery) ([]UsageRow, error)
}

// Maintenance is the operator's side of a store: checking it, backing it up, closing it.
type Maintenance interface {
	// Health reports whether the store takes new work now: nil, or why not. A store that is
	// unavailable for a while (its disk nearly full, its database unreachable) still reads and
	// still resolves the holds it has taken.
	//
	// Expected errors: ErrUnavailable (with the reason), ErrClosed, or the error that stopped
	// the store.
	Health(ctx context.Context) error

	// Verify recomputes every account's figures from its entries and reports each difference
	// with what the store keeps, every negative balance or available figure, every broken index
	// and every hold left open long past its expiry. A store that works has no problems:
	// VerifyReport.OK. Other calls go on while it runs.
	//
	// Expected errors:
	//   - ErrClosed; ctx's error.
	Verify(ctx context.Context) (VerifyReport, error)

	// Backup writes an online, consistent backup of the whole ledger to w, in the engine's own
	// format (Badger: see Restore). Other calls go on while it runs.
	//
	// Expected errors:
	//   - ErrClosed.
	Backup(ctx context.Context, w io.Writer) error

	// Placement says where the store keeps its data: whether other instances share it, and
	// the directory of its files on this machine.
	Placement() Placement

	// Close waits for calls in flight, writes what is still only in memory (keys' last-use
	// times) and releases the store. Later calls fail with ErrClosed. It is safe to call more
	// than once; later calls return the first one's result.
	//
	// Expected errors: none. An error means that something held only in memory may be lost.
	Close() error
}

// Store is the whole ledger API, every role in one. All methods are safe for concurrent use.
type Store interface {
	Accounts
	Keys
	Credits
	Idempotency
	Generations
	Credentials
	Reports
	Maintenance
	Mail
	Payments
	Reversals
	Receipts
	KeyReports
	Members
	Operators
	KeySearch
	MoneyReports
	Codes
	TopUps
	Alerts
}
