package pgledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// The e-mail outbox of the PostgreSQL engine, shared by every instance. A claim is one
// UPDATE over rows picked FOR UPDATE SKIP LOCKED: two instances claiming at once take
// different messages, and a leased message is skipped until its lease runs out. Marking and
// retrying are conditional on the claim, so an instance whose lease ran out changes nothing.

const pgOutboxCols = "id, account_id, kind, sealed, created, attempts, next_attempt, claim, last_error, lease_until"

type outboxRow struct {
	m                                ledger.MailMessage
	created, nextAttempt, leaseUntil int64
}

func (r *outboxRow) dest() []any {
	return []any{&r.m.ID, &r.m.AccountID, &r.m.Kind, &r.m.Sealed, &r.created, &r.m.Attempts, &r.nextAttempt, &r.m.Claim, &r.m.LastError, &r.leaseUntil}
}

// message is the row's message with its times set; lease_until 0 (never leased, or retried
// since) is the zero time.
func (r *outboxRow) message() ledger.MailMessage {
	r.m.Created, r.m.NextAttempt = pgTime(r.created), pgTime(r.nextAttempt)
	if r.leaseUntil != 0 {
		r.m.LeaseUntil = pgTime(r.leaseUntil)
	}
	return r.m
}

// EnqueueMail stores a message for the senders.
func (s *Postgres) EnqueueMail(ctx context.Context, m ledger.MailMessage) (string, error) {
	if err := ledger.CheckMail(m); err != nil {
		return "", err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return "", err
	}
	defer done()
	t := s.now().UTC()
	if m.NextAttempt.IsZero() {
		m.NextAttempt = t
	}
	id := ledger.NewMailID(t)
	_, err = s.pool.Exec(wctx, `INSERT INTO mail_outbox (id, account_id, kind, sealed, created, next_attempt)
		VALUES ($1, $2, $3, $4, $5, $6)`, id, m.AccountID, m.Kind, m.Sealed, t.UnixNano(), m.NextAttempt.UnixNano())
	if err != nil {
		return "", pgErr(ctx, "queueing mail", err)
	}
	return id, nil
}

// ClaimMail leases due messages.
func (s *Postgres) ClaimMail(ctx context.Context, lease time.Duration, max int) ([]ledger.MailMessage, error) {
	if err := ledger.CheckClaim(lease, max); err != nil {
		return nil, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	t := s.now().UTC()
	rows, _ := s.pool.Query(wctx, `UPDATE mail_outbox SET lease_until = $2, claim = $3 || id, attempts = attempts + 1
		WHERE id IN (SELECT id FROM mail_outbox WHERE next_attempt <= $1 AND lease_until <= $1
			ORDER BY next_attempt, id LIMIT $4 FOR UPDATE SKIP LOCKED)
		RETURNING `+pgOutboxCols, t.UnixNano(), t.Add(lease).UnixNano(), ledger.RandomBase62(22), max)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.MailMessage, error) {
		var r outboxRow
		err := row.Scan(r.dest()...)
		return r.message(), err
	})
	if err != nil {
		return nil, pgErr(ctx, "claiming mail", err)
	}
	return out, nil
}

// MarkMailSent deletes a sent message.
func (s *Postgres) MarkMailSent(ctx context.Context, id, claim string) error {
	return s.execClaimed(ctx, "marking mail sent", "mail", `DELETE FROM mail_outbox WHERE id = $1 AND claim = $2 AND claim <> ''`, id, claim)
}

// RetryMail makes a message due again later.
func (s *Postgres) RetryMail(ctx context.Context, id, claim string, at time.Time, lastErr string) error {
	return s.execClaimed(ctx, "retrying mail", "mail", `UPDATE mail_outbox SET next_attempt = $3, lease_until = 0, claim = '', last_error = $4
		WHERE id = $1 AND claim = $2 AND claim <> ''`, id, claim, at.UnixNano(), ledger.TruncateUTF8(lastErr, 512))
}

// ListMail lists the queued messages, oldest first, without reading their sealed bytes.
func (s *Postgres) ListMail(ctx context.Context, limit int) ([]ledger.MailMessage, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	// The same columns as pgOutboxCols, with no sealed bytes and no claim.
	rows, _ := s.pool.Query(qctx, `SELECT id, account_id, kind, NULL::bytea, created, attempts, next_attempt, '', last_error, lease_until
		FROM mail_outbox ORDER BY created, id LIMIT $1`, limit)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.MailMessage, error) {
		var r outboxRow
		err := row.Scan(r.dest()...)
		return r.message(), err
	})
	if err != nil {
		return nil, pgErr(ctx, "listing mail", err)
	}
	if out == nil {
		out = []ledger.MailMessage{}
	}
	return out, nil
}

// DropMail deletes a queued message, leased or not. A sender's later MarkMailSent or RetryMail
// then changes no row: ErrNotFound.
func (s *Postgres) DropMail(ctx context.Context, id string) error {
	if err := ledger.CheckMailID(id); err != nil {
		return err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return err
	}
	defer done()
	tag, err := s.pool.Exec(wctx, `DELETE FROM mail_outbox WHERE id = $1`, id)
	if err != nil {
		return pgErr(ctx, "dropping mail", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("mail %q: %w", id, ledger.ErrNotFound)
	}
	return nil
}
