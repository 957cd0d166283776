package ledger

import (
	"cmp"
	"time"
)

// The rules of Idempotency-Key records, for every engine: how long a record holds its key, and
// when a new request may take a key over. Engines store and find the records
// (badgerledger/idempotency.go); these functions decide.

// IdempotencyTTL is how long an Idempotency-Key record is kept.
const IdempotencyTTL = 24 * time.Hour

// StatusReleased, given to FinishIdempotent, releases the key: the request it began ended
// without effect (for a generate request: without a charge), so a retry may run it again.
const StatusReleased = -1

// IdemExpired reports whether rec is past its IdempotencyTTL at t: its key is free again,
// whether or not the store has dropped it yet.
func IdemExpired(rec IdempotencyRecord, t time.Time) bool {
	return !t.Before(rec.Created.Add(IdempotencyTTL))
}

// IdemReusable reports whether a record no longer holds its key at t: it was released, or it is
// still "in progress" long after any request could run (its process died; its hold expired).
// defaultHoldTTL is the store's, for a record without a HoldTTL of its own.
func IdemReusable(rec IdempotencyRecord, t time.Time, defaultHoldTTL time.Duration) bool {
	if rec.Status == StatusReleased {
		return true
	}
	return rec.Status == 0 && t.Sub(rec.Created) > cmp.Or(rec.HoldTTL, defaultHoldTTL)
}

// IdemOrphaned reports whether a record was left in progress by a process that is gone: it
// began before the store was opened by a process that is the only one to use it (Badger's
// directory lock). A retry after a crash then runs at once instead of waiting for the hold TTL.
func IdemOrphaned(rec IdempotencyRecord, opened time.Time) bool {
	return rec.Status == 0 && rec.Created.Before(opened)
}
