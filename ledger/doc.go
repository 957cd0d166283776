// Package ledger owns every piece of money-like state of caddy-textgen: accounts, API keys,
// credit balances, holds and the append-only ledger of entries. It imports nothing from Caddy.
//
// # Roles
//
// Store is the ledger's Go API. It embeds one interface per role (roles.go), and every method's
// doc comment lists the sentinel errors (errors.go) it may return:
//
//	Accounts     CreateAccount, GetAccount, GetAccountByEmail, ListAccounts, SetAccountStatus
//	Keys         CreateKey, CreateKeyCapped, ListKeys, RevokeKey, UpdateKey, RollKey, LookupKey, LookupKeyBalance
//	Credits      Hold, Reserve, Settle, Void, Grant, Balance, Purchases, Purchase,
//	             RefillTestCredits, GetHold
//	Idempotency  BeginIdempotent, FinishIdempotent
//	Generations  PutGenerations, GetGeneration, DeleteGeneration, DeleteExpiredGenerations
//	Credentials  CreateAccountWithPassword, SetPassword, Authenticate,
//	             CreateSession, GetSession, DeleteSession
//	Reports      History, Usage
//	Maintenance  Health, Verify, Backup, Close
//	Mail         EnqueueMail, ClaimMail, MarkMailSent, RetryMail, ListMail, DropMail,
//	             tokens, address state, low-balance alert (LowBalanceChanges)
//	Payments     RecordUnmatchedPayment, UnmatchedPayments, ResolveUnmatchedPayment
//	Reversals    RecordPayment, GetPayment, PaymentOf, AccountPayments, Reverse, ListReversals
//
// # Invariants
//
// For every account and mode (live, test), at every moment:
//
//	balance   = sum of the account's entries of that mode >= 0
//	available = balance - open holds                     >= 0
//
// with one exception, debt: a refund or dispute (reversals.go) takes a purchase's credits back
// even if they were spent, so a live balance may go below zero, never by more than the credits
// reversals took and did not give back (available >= -reversed); holds refuse until purchases
// pay it.
//
// A hold (entry amount 0) reserves one credit; it is resolved exactly once, by a settle (amount
// -1) or a void (amount 0). A request id is held at most once per account and resolved at most
// once; repeated calls report the first outcome. A grant reference credits at most once per
// account. Holds left open past their TTL (by an instance that died, say) are voided with
// reason "expired" by a background sweep; Badger, which one process holds alone, also voids every
// open hold when it opens ("restart"). Entries are numbered 1, 2, 3... per account and never
// change. Verify recomputes all of this from the entries.
//
// # Engines
//
// An engine is one implementation of Store. Engines live in this package, each in files of its
// own prefix: an engine in a subpackage (ledger/badger) would import its parent for the types,
// which the house rule forbids.
//
//   - badger_*.go: the Badger engine, type Badger, returned by Open; it keeps the ledger in a
//     Badger v4 directory, for one Caddy instance. Described below.
//   - postgres_*.go: the PostgreSQL engine, type Postgres, returned by OpenPostgres, for several
//     Caddy instances behind one load balancer; its design is described on the type.
//
// CopyLedger moves an engine that implements Exporter (Badger) into an empty PostgreSQL
// database (export.go, postgres_copy.go).
//
// The files without a prefix belong to every engine: the API (roles.go, types.go, errors.go)
// and the rules an engine must apply the same way (validate.go: argument checks; ids.go and
// apikey.go: ids, tokens and the API key format; password.go: password policy and argon2id;
// idempotency.go: Idempotency-Key rules; clock.go: the clock). An engine uses these and
// nothing of another engine. One conformance suite (conformance_test.go), written against the
// role interfaces only, runs on every engine; tests of one engine's internals (crash recovery,
// reopening, backup files, a full disk; several instances, a database that goes away) are in
// its own badger_*_test.go and postgres_*_test.go files.
//
// # Badger: key layout
//
// Every Badger key is a one-byte type code (badger_prefix.go) followed by fixed-width ids,
// numbers big-endian, so that byte order is numeric order:
//
//	01 acct                -> Account (JSON)
//	02 email               -> acct id (email trimmed and lower-cased)
//	03 sha256(key)         -> acct id + key id
//	04 acct key-id         -> key record: the public Key and its digest (never the key)
//	05 acct                -> balance record: live and test balance, next entry number
//	06 acct request-id     -> hold record: mode, state, key id, tool, created, expires, outcome
//	07 acct request-id     -> (empty) present while the hold is open; loaded at Open
//	08 acct seq            -> Entry (JSON); seq counts 1, 2, 3... per account, so History is
//	                          a reverse iteration over one prefix
//	09 acct reference      -> seq of the entry that first used the grant reference
//	0A acct idempotency-key -> IdempotencyRecord (JSON), with a 24 h Badger TTL
//	0B name                -> metadata (schema version)
//	0C acct                -> credential: argon2id hash of the password (PHC string)
//	0D session digest      -> session (SHA-256 of the token; expiry; CSRF secret), Badger TTL
//	0E acct session digest -> empty: finds an account's sessions (for log-out everywhere)
//	0F-12                  -> kept generations, the e-mail outbox and tokens (badger_prefix.go)
//	13 reference           -> UnmatchedPayment (JSON): a payment that credited nothing; never
//	                          deleted
//	14 payment id          -> Payment (JSON): a payment that refunds and disputes name
//	15 acct payment id     -> (empty): an account's payments
//	16 reversal id         -> Reversal (JSON): a refund or dispute as applied; never deleted
//	17 reference           -> payment id: the payment of a purchase
//
// Account ids are "acct_" + 16 base62 characters, key ids "key_" + 12 (ids.go).
//
// # Badger: concurrency and durability
//
// The working state (accounts, keys, balances, open holds, next entry numbers) lives in memory,
// loaded at Open. A change takes its account's mutex, checks and applies itself in memory,
// queues its blind writes (no reads inside a read-write transaction, so no ErrConflict) to the
// group committer while still holding the mutex, and waits for the commit after releasing it.
// The committer writes everything queued as one Badger transaction, so one sync serves many
// callers and accounts, per-account order is queue order, and the directory always holds a
// prefix of the queued changes. A call returns only after its change is durable; the only
// thing visible earlier is the in-memory Balance of a change still in flight. If a commit ever
// fails, the store stops accepting work (memory may be ahead of disk) until it is reopened.
//
// A change that was queued is committed even if its caller's context is canceled meanwhile
// (roles.go says why calls that change credits ignore ctx).
//
// Open voids the holds that expired while the store was closed before it returns, and first
// removes the empty log files that a crash during Badger's file creation leaves, which Badger
// itself refuses to open (badger_repair.go).
//
// Writes are synced (SyncWrites) unless Options.DisableSyncWrites is set: a charge or purchase
// that was acknowledged must survive a power loss. API keys' last-use times are the exception:
// they are kept in memory and flushed every LastUsedFlushInterval and at Close, so a crash can
// lose up to one interval of them, never a credit.
package ledger
