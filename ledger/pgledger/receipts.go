package pgledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// Signed receipts in the PostgreSQL engine (migrations/00011_receipts.sql), shared by
// every instance. Adding a key locks the table for its transaction, so of instances starting
// together one stores the first key and the others read it; a partial unique index allows one
// current key whatever happens. Digests are inserted with the put that ends a generation
// (queueReceiptDigest), once: a repeated put changes nothing.

const pgReceiptKeyCols = "id, public_key, sealed_private_key, valid_from, valid_until"

func scanReceiptKey(row pgx.CollectableRow) (ledger.ReceiptKey, error) {
	var k ledger.ReceiptKey
	var from int64
	var until *int64
	err := row.Scan(&k.ID, &k.PublicKey, &k.SealedPrivateKey, &from, &until)
	k.ValidFrom, k.ValidUntil = pgTime(from), pgTimeOrZero(until)
	return k, err
}

// ReceiptKeys returns every signing key, oldest first.
func (s *Postgres) ReceiptKeys(ctx context.Context) ([]ledger.ReceiptKey, error) {
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return s.receiptKeys(ctx, qctx, s.pool)
}

type pgQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (s *Postgres) receiptKeys(ctx, qctx context.Context, q pgQuerier) ([]ledger.ReceiptKey, error) {
	rows, _ := q.Query(qctx, `SELECT `+pgReceiptKeyCols+` FROM receipt_keys`)
	keys, err := pgx.CollectRows(rows, scanReceiptKey)
	if err != nil {
		return nil, pgErr(ctx, "reading the receipt keys", err)
	}
	ledger.SortReceiptKeys(keys)
	return keys, nil
}

// AddReceiptKey stores k as the current key: when there is none, or to rotate.
func (s *Postgres) AddReceiptKey(ctx context.Context, k ledger.ReceiptKey, rotate bool) (ledger.ReceiptKey, error) {
	if err := ledger.CheckReceiptKey(k); err != nil {
		return ledger.ReceiptKey{}, err
	}
	if err := pgStorable("receipt key id", k.ID); err != nil {
		return ledger.ReceiptKey{}, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.ReceiptKey{}, err
	}
	defer done()
	var cur ledger.ReceiptKey
	err = pgx.BeginFunc(wctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(wctx, `LOCK TABLE receipt_keys IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		keys, err := s.receiptKeys(ctx, wctx, tx)
		if err != nil {
			return err
		}
		k.ValidFrom, k.ValidUntil = s.now().UTC(), time.Time{}
		for _, o := range keys {
			if o.ID == k.ID {
				return fmt.Errorf("receipt key %q is taken: %w", k.ID, ledger.ErrInvalidArgument)
			}
			if o.ValidUntil.IsZero() && !rotate {
				cur = o
				return nil
			}
		}
		at := k.ValidFrom.UnixNano()
		if _, err := tx.Exec(wctx, `UPDATE receipt_keys SET valid_until = $1 WHERE valid_until IS NULL`, at); err != nil {
			return err
		}
		if _, err := tx.Exec(wctx, `INSERT INTO receipt_keys (`+pgReceiptKeyCols+`) VALUES ($1, $2, $3, $4, NULL)`,
			k.ID, k.PublicKey, k.SealedPrivateKey, at); err != nil {
			return err
		}
		k.ValidFrom = pgTime(at)
		cur = k
		return nil
	})
	if errors.Is(err, ledger.ErrInvalidArgument) || errors.Is(err, ledger.ErrUnavailable) {
		return ledger.ReceiptKey{}, err
	}
	if err != nil {
		return ledger.ReceiptKey{}, pgErr(ctx, "adding a receipt key", err)
	}
	return cur, nil
}

// ReceiptDigest returns the digest of a generation's text.
func (s *Postgres) ReceiptDigest(ctx context.Context, accountID, requestID string) ([]byte, error) {
	if err := pgStorable("request id", accountID, requestID); err != nil {
		return nil, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	var d []byte
	err = s.pool.QueryRow(qctx, `SELECT sha256 FROM receipt_digests WHERE account_id = $1 AND request_id = $2`,
		accountID, requestID).Scan(&d)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("text digest of %q: %w", requestID, ledger.ErrNotFound)
	}
	if err != nil {
		return nil, pgErr(ctx, "reading a text digest", err)
	}
	return d, nil
}

// queueReceiptDigest queues the digest a put carries, if any.
func queueReceiptDigest(b *pgx.Batch, p ledger.GenerationPut) {
	if p.TextSHA256 == nil {
		return
	}
	b.Queue(`INSERT INTO receipt_digests (account_id, request_id, sha256) VALUES ($1, $2, $3)
		ON CONFLICT (account_id, request_id) DO NOTHING`, p.Record.AccountID, p.Record.RequestID, p.TextSHA256)
}

// ReceiptKey stores a receipt key as it was.
func (p *pgImport) ReceiptKey(k ledger.ReceiptKey) error {
	var until *int64
	if !k.ValidUntil.IsZero() {
		u := k.ValidUntil.UnixNano()
		until = &u
	}
	return p.add("receipt_keys", k.ID, k.PublicKey, k.SealedPrivateKey, k.ValidFrom.UnixNano(), until)
}

// ReceiptDigest stores a generation's text digest.
func (p *pgImport) ReceiptDigest(d ledger.ReceiptDigestRecord) error {
	return p.add("receipt_digests", d.AccountID, d.RequestID, d.SHA256)
}
