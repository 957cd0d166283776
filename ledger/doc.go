// Package ledger owns every piece of money-like state of caddy-textgen: accounts, API keys,
// credit balances, holds and the append-only ledger of entries. It imports nothing from Caddy.
//
// The Store interface is independent of Badger so that a second implementation (for example
// PostgreSQL, for several Caddy instances behind one load balancer) can replace the Badger one.
// Badger, returned by Open, keeps the ledger in a Badger v4 directory.
//
// # Invariants
//
// For every account and mode (live, test), at every moment:
//
//	balance   = sum of the account's entries of that mode >= 0
//	available = balance - open holds                     >= 0
//
// A hold (entry amount 0) reserves one credit; it is resolved exactly once, by a settle (amount
// -1) or a void (amount 0). A request id is held at most once per account and resolved at most
// once; repeated calls report the first outcome. A grant reference credits at most once per
// account. Holds left open past HoldTTL (by a crash, say) are voided with reason "expired" by a
// background sweep and by Open before it returns. Verify recomputes all of this from the entries.
// Open also removes the empty log files a crash during Badger's file creation leaves (repair.go).
//
// # Key layout
//
// Every Badger key is a one-byte type code (prefix.go) followed by fixed-width ids, numbers
// big-endian, so that byte order is numeric order:
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
//
// Account ids are "acct_" + 16 base62 characters, key ids "key_" + 12.
//
// # Concurrency and durability
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
// Calls that change the ledger do not give up when their context is canceled: a handler voids
// a hold after its client went away, with a context that is already done, and a change that
// was queued is committed anyway. Long reads (History, Usage, Verify) do honour ctx.
//
// Writes are synced (SyncWrites) unless Options.DisableSyncWrites is set: a charge or purchase
// that was acknowledged must survive a power loss. API keys' last-use times are the exception:
// they are kept in memory and flushed every LastUsedFlushInterval and at Close, so a crash can
// lose up to one interval of them, never a credit.
package ledger
