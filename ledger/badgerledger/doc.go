// Package badgerledger is the Badger engine of the ledger: a ledger.Store kept in a Badger v4
// directory, for one Caddy instance (Open). It passes the conformance suite of
// ledger/ledgertest on disk and in memory.
//
// # Key layout
//
// Every Badger key is a one-byte type code (prefix.go) followed by fixed-width ids,
// numbers big-endian, so that byte order is numeric order:
//
//	01 acct                -> Account (JSON)
//	02 email               -> acct id (email trimmed and lower-cased)
//	03 sha256(key)         -> acct id + key id
//	04 acct key-id         -> key record: the public Key and its digest (never the key)
//	05 acct                -> balance record: live and test balance, next entry number
//	06 acct request-id     -> hold record: mode, state, key id, tool, created, expires, outcome
//	07 acct request-id     -> (empty) present while the hold is open; read with its account
//	08 acct seq            -> Entry (JSON); seq counts 1, 2, 3... per account, so History is
//	                          a reverse iteration over one prefix
//	09 acct reference      -> seq of the entry that first used the grant reference
//	0A acct idempotency-key -> IdempotencyRecord (JSON), with a 24 h Badger TTL
//	0B name                -> metadata (schema version)
//	0C acct                -> credential: argon2id hash of the password (PHC string)
//	0D session digest      -> session (SHA-256 of the token; expiry; CSRF secret), Badger TTL
//	0E acct session digest -> empty: finds an account's sessions (for log-out everywhere)
//	0F-12                  -> kept generations, the e-mail outbox and tokens (prefix.go)
//	13 reference           -> UnmatchedPayment (JSON): a payment that credited nothing; never
//	                          deleted
//	14 payment id          -> Payment (JSON): a payment that refunds and disputes name
//	15 acct payment id     -> (empty): an account's payments
//	16 reversal id         -> Reversal (JSON): a refund or dispute as applied; never deleted
//	17 reference           -> payment id: the payment of a purchase
//
// Account ids are "acct_" + 16 Base62 characters, key ids "key_" + 12 (the ledger's ids.go).
//
// # Concurrency and durability
//
// The working state of an account (its record, keys, balances, open holds, lots, next entry
// number) is read from Badger on first use into a bounded cache (cache.go, Options.CacheAccounts)
// and kept while it is used; Open reads no account. A key is found by its digest among the
// cached accounts' keys, or else through the key-hash index, which reads its account. An account
// leaves the cache only when nothing of it is in use or only in memory (an open hold, a change
// not yet in the committer's snapshot, a key's last use not yet written), so Badger stays the
// source of truth and a revocation, a roll or a budget holds at the next request. A change takes its account's mutex, checks and applies itself in memory,
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
// itself refuses to open (repair.go).
//
// Writes are synced (SyncWrites) unless Options.DisableSyncWrites is set: a charge or purchase
// that was acknowledged must survive a power loss. API keys' last-use times are the exception:
// they are kept in memory and flushed every LastUsedFlushInterval and at Close, so a crash can
// lose up to one interval of them, never a credit.
package badgerledger
