package pgledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// Idempotency-Key records of the PostgreSQL engine, one row per (account, key). The rules of
// ledger/idempotency.go decide when a new request may take a key over, with one difference from
// Badger: a record left in progress is never taken over just because this process started after
// it (IdemOrphaned), since on a shared database the instance that began it may be alive; it is
// free once its hold TTL has passed (IdemReusable).

const pgIdemCols = "account_id, idem_key, request_id, fingerprint, status, created, hold_ttl"

type idemRow struct {
	rec              ledger.IdempotencyRecord
	created, holdTTL int64
}

func (r *idemRow) dest() []any {
	c := &r.rec
	return []any{&c.AccountID, &c.Key, &c.RequestID, &c.Fingerprint, &c.Status, &r.created, &r.holdTTL}
}

func (r *idemRow) record() ledger.IdempotencyRecord {
	rec := r.rec
	rec.Created, rec.HoldTTL = pgTime(r.created), time.Duration(r.holdTTL)
	return rec
}

// BeginIdempotent stores rec if (AccountID, Key) is new, or its record no longer holds the key,
// and returns (rec, true); otherwise it returns the existing record and false. Two instances
// beginning the same key at once: one inserts, the other waits for it on the primary key and
// gets its record.
func (s *Postgres) BeginIdempotent(ctx context.Context, rec ledger.IdempotencyRecord) (ledger.IdempotencyRecord, bool, error) {
	if err := ledger.CheckIdempotencyRecord(rec); err != nil {
		return ledger.IdempotencyRecord{}, false, err
	}
	if err := pgStorable("idempotency record", rec.Key, rec.RequestID, rec.Fingerprint); err != nil {
		return ledger.IdempotencyRecord{}, false, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.IdempotencyRecord{}, false, err
	}
	defer done()
	if rec.Created.IsZero() {
		rec.Created = s.now()
	}
	rec.Created = rec.Created.UTC()
	args := []any{rec.AccountID, rec.Key, rec.RequestID, rec.Fingerprint, rec.Status, rec.Created.UnixNano(), int64(rec.HoldTTL)}
	// The common case, a new key: one statement.
	tag, err := s.pool.Exec(wctx, `INSERT INTO idempotency (`+pgIdemCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (account_id, idem_key) DO NOTHING`, args...)
	switch {
	case pgForeignKey(err):
		return ledger.IdempotencyRecord{}, false, fmt.Errorf("account %q: %w", rec.AccountID, ledger.ErrNotFound)
	case err != nil:
		return ledger.IdempotencyRecord{}, false, pgErr(ctx, "beginning idempotent request", err)
	case tag.RowsAffected() == 1:
		return rec, true, nil
	}
	// The key has a record: lock it, and replace it if it no longer holds the key.
	var old ledger.IdempotencyRecord
	taken := false
	err = pgx.BeginFunc(wctx, s.pool, func(tx pgx.Tx) error {
		var r idemRow
		err := tx.QueryRow(wctx, `SELECT `+pgIdemCols+` FROM idempotency WHERE account_id = $1 AND idem_key = $2 FOR UPDATE`,
			rec.AccountID, rec.Key).Scan(r.dest()...)
		if errors.Is(err, pgx.ErrNoRows) { // dropped by a purge meanwhile: take it
			_, err = tx.Exec(wctx, `INSERT INTO idempotency (`+pgIdemCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`, args...)
			taken = true
			return err
		}
		if err != nil {
			return err
		}
		old = r.record()
		t := s.now()
		if !ledger.IdemExpired(old, t) && !ledger.IdemReusable(old, t, s.opts.HoldTTL) {
			return nil
		}
		taken = true
		_, err = tx.Exec(wctx, `UPDATE idempotency SET request_id = $3, fingerprint = $4, status = $5, created = $6, hold_ttl = $7
			WHERE account_id = $1 AND idem_key = $2`, args...)
		return err
	})
	if err != nil {
		return ledger.IdempotencyRecord{}, false, pgErr(ctx, "beginning idempotent request", err)
	}
	if taken {
		return rec, true, nil
	}
	return old, false, nil
}

// FinishIdempotent records the final HTTP status of the request that began key, or releases the
// key with StatusReleased.
func (s *Postgres) FinishIdempotent(ctx context.Context, accountID, key string, status int) error {
	if err := ledger.CheckFinishStatus(status); err != nil {
		return err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return err
	}
	defer done()
	// A record past its 24 h is gone, whether or not a purge dropped it yet.
	tag, err := s.pool.Exec(wctx, `UPDATE idempotency SET status = $3 WHERE account_id = $1 AND idem_key = $2 AND created > $4`,
		accountID, key, status, s.now().Add(-ledger.IdempotencyTTL).UnixNano())
	if err != nil {
		return pgErr(ctx, "finishing idempotent request", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("idempotency key %q of account %q: %w", key, accountID, ledger.ErrNotFound)
	}
	return nil
}
