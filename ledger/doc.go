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
//	Codes        CreateCode, ListCodes, GetCode, DisableCode, CodeRedemptions, Redeem
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
// An engine is one implementation of Store, in a package of its own that imports this one and
// no other engine; this package imports no engine:
//
//   - ledger/badgerledger: type Badger, returned by badgerledger.Open; it keeps the ledger in a
//     Badger v4 directory, for one Caddy instance.
//   - ledger/pgledger: type Postgres, returned by pgledger.OpenPostgres, for several Caddy
//     instances behind one load balancer; its design is described on the type.
//
// pgledger.CopyLedger moves an engine that implements Exporter (Badger) into an empty
// PostgreSQL database (export.go here, pgledger's copy.go).
//
// This package holds what belongs to every engine: the API (roles.go, types.go, errors.go,
// placement.go: where a store keeps its data, as it states it) and the rules an engine must
// apply the same way (validate.go: argument checks; ids.go and apikey.go: ids, tokens and the
// API key format; password.go: password policy and argon2id; idempotency.go: Idempotency-Key
// rules; keylimits.go, members.go, reversals.go, settle_late.go: the money rules; lifecycle.go:
// closing once, the background work and admitting calls). An engine reads the time from its
// own clock (its options' Now), so that tests move it instead of sleeping. The conformance
// suite, ledger/ledgertest, written against the role interfaces only, runs on every engine
// from the engine's own tests (ledgertest.Run); tests of one engine's internals (crash
// recovery, reopening, backup files, a full disk; several instances, a database that goes
// away) are in its own package.
package ledger
