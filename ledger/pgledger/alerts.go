package pgledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// Alerts of the PostgreSQL engine, shared by every instance. An endpoint is made under the
// advisory lock of the account's endpoints, so that endpoints made at once never pass the cap.
// A fan-out is one INSERT ... SELECT over the subscribed endpoints, ON CONFLICT DO NOTHING (a
// delivery's id is its endpoint's and event's: a repeat is dropped). A claim is one UPDATE over
// rows picked FOR UPDATE SKIP LOCKED, as the mail outbox's (outbox.go); marking is conditional
// on the claim.

const pgAlertCols = "d.id, d.account_id, d.endpoint_id, d.event_id, d.kind, d.payload, d.created, d.state, d.attempts, d.next_attempt, d.lease_until, d.claim, d.last_status, d.last_error, d.finished"

type alertRow struct {
	d                                          ledger.AlertDelivery
	created, nextAttempt, leaseUntil, finished int64
}

func (r *alertRow) dest() []any {
	return []any{&r.d.ID, &r.d.AccountID, &r.d.EndpointID, &r.d.EventID, &r.d.Kind, &r.d.Payload, &r.created, &r.d.State,
		&r.d.Attempts, &r.nextAttempt, &r.leaseUntil, &r.d.Claim, &r.d.LastStatus, &r.d.LastError, &r.finished}
}

func (r *alertRow) delivery() ledger.AlertDelivery {
	r.d.Created, r.d.NextAttempt = pgTime(r.created), pgTime(r.nextAttempt)
	if r.leaseUntil != 0 {
		r.d.LeaseUntil = pgTime(r.leaseUntil)
	}
	if r.finished != 0 {
		r.d.Finished = pgTime(r.finished)
	}
	return r.d
}

func scanAlertEndpoint(row pgx.CollectableRow) (ledger.AlertEndpoint, error) {
	var e ledger.AlertEndpoint
	var created int64
	err := row.Scan(&e.ID, &e.AccountID, &e.URL, &e.Kinds, &e.SealedSecret, &created)
	e.Created = pgTime(created)
	if len(e.Kinds) == 0 {
		e.Kinds = nil
	}
	return e, err
}

// CreateAlertEndpoint registers an endpoint, at most ledger.MaxAlertEndpoints per account.
func (s *Postgres) CreateAlertEndpoint(ctx context.Context, e ledger.AlertEndpoint) (ledger.AlertEndpoint, error) {
	if err := ledger.CheckAlertEndpoint(&e); err != nil {
		return e, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return e, err
	}
	defer done()
	t := s.now().UTC()
	e.ID, e.Created = ledger.NewAlertEndpointID(t), t
	kinds := e.Kinds
	if kinds == nil {
		kinds = []string{}
	}
	err = pgx.BeginFunc(wctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(wctx, `SELECT pg_advisory_xact_lock(hashtextextended('ledger alert endpoints ' || $1, 0))`, e.AccountID); err != nil {
			return err
		}
		var exists bool
		var n int
		if err := tx.QueryRow(wctx, `SELECT EXISTS (SELECT 1 FROM accounts WHERE id = $1),
			(SELECT count(*) FROM alert_endpoints WHERE account_id = $1)`, e.AccountID).Scan(&exists, &n); err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("account %q: %w", e.AccountID, ledger.ErrNotFound)
		}
		if n >= ledger.MaxAlertEndpoints {
			return fmt.Errorf("account %s: %w", e.AccountID, ledger.ErrTooManyAlertEndpoints)
		}
		_, err := tx.Exec(wctx, `INSERT INTO alert_endpoints (id, account_id, url, kinds, sealed_secret, created)
			VALUES ($1, $2, $3, $4, $5, $6)`, e.ID, e.AccountID, e.URL, kinds, e.SealedSecret, t.UnixNano())
		return err
	})
	if errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrTooManyAlertEndpoints) {
		return e, err
	}
	if err != nil {
		return e, pgErr(ctx, "creating an alert endpoint", err)
	}
	return e, nil
}

// ListAlertEndpoints lists the account's endpoints, oldest first.
func (s *Postgres) ListAlertEndpoints(ctx context.Context, accountID string) ([]ledger.AlertEndpoint, error) {
	return readList(s, ctx, "listing alert endpoints", scanAlertEndpoint, `SELECT id, account_id, url, kinds, sealed_secret, created FROM alert_endpoints
		WHERE account_id = $1 ORDER BY id`, accountID)
}

// DeleteAlertEndpoint deletes an endpoint; its deliveries go with it (ON DELETE CASCADE).
func (s *Postgres) DeleteAlertEndpoint(ctx context.Context, accountID, id string) error {
	if err := ledger.CheckAlertEndpointID(id); err != nil {
		return err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return err
	}
	defer done()
	tag, err := s.pool.Exec(wctx, `DELETE FROM alert_endpoints WHERE id = $1 AND account_id = $2`, id, accountID)
	if err != nil {
		return pgErr(ctx, "deleting an alert endpoint", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("alert endpoint %q: %w", id, ledger.ErrNotFound)
	}
	return nil
}

// EnqueueAlertEvent fans the event out to the subscribed endpoints in one statement, and drops
// the account's ended deliveries past ledger.AlertKeep.
func (s *Postgres) EnqueueAlertEvent(ctx context.Context, ev ledger.AlertEvent) (int, error) {
	if err := ledger.CheckAlertEvent(ev); err != nil {
		return 0, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	t := s.now().UTC()
	var n int64
	err = pgx.BeginFunc(wctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(wctx, `DELETE FROM alert_deliveries WHERE account_id = $1 AND state <> 'pending' AND finished < $2`,
			ev.AccountID, t.Add(-ledger.AlertKeep).UnixNano()); err != nil {
			return err
		}
		eps, err := tx.Query(wctx, `SELECT id FROM alert_endpoints WHERE account_id = $1 AND (kinds = '{}' OR $2 = ANY (kinds))`, ev.AccountID, ev.Kind)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(eps, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, ep := range ids {
			tag, err := tx.Exec(wctx, `INSERT INTO alert_deliveries (id, account_id, endpoint_id, event_id, kind, payload, created, next_attempt)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $7) ON CONFLICT (id) DO NOTHING`,
				ledger.AlertDeliveryID(ep, ev.ID), ev.AccountID, ep, ev.ID, ev.Kind, ev.Payload, t.UnixNano())
			if err != nil {
				return err
			}
			n += tag.RowsAffected()
		}
		return nil
	})
	if err != nil {
		return 0, pgErr(ctx, "queueing an alert event", err)
	}
	return int(n), nil
}

// ClaimAlertDeliveries leases due deliveries.
func (s *Postgres) ClaimAlertDeliveries(ctx context.Context, lease time.Duration, max int) ([]ledger.AlertDelivery, error) {
	if err := ledger.CheckClaim(lease, max); err != nil {
		return nil, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	t := s.now().UTC()
	rows, _ := s.pool.Query(wctx, `WITH c AS (UPDATE alert_deliveries d SET lease_until = $2, claim = $3 || d.id, attempts = d.attempts + 1
		WHERE d.id IN (SELECT id FROM alert_deliveries WHERE state = 'pending' AND next_attempt <= $1 AND lease_until <= $1
			ORDER BY next_attempt, id LIMIT $4 FOR UPDATE SKIP LOCKED)
		RETURNING `+pgAlertCols+`)
		SELECT `+pgAlertCols+`, e.url, e.sealed_secret FROM c d JOIN alert_endpoints e ON e.id = d.endpoint_id
		ORDER BY d.next_attempt, d.id`, t.UnixNano(), t.Add(lease).UnixNano(), ledger.RandomBase62(22), max)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.AlertDelivery, error) {
		var r alertRow
		var url string
		var secret []byte
		err := row.Scan(append(r.dest(), &url, &secret)...)
		d := r.delivery()
		d.URL, d.SealedSecret = url, secret
		return d, err
	})
	if err != nil {
		return nil, pgErr(ctx, "claiming alert deliveries", err)
	}
	return out, nil
}

// MarkAlertDelivered ends a delivery as delivered.
func (s *Postgres) MarkAlertDelivered(ctx context.Context, id, claim string, status int) error {
	return s.execClaimed(ctx, "marking an alert delivered", "alert delivery", `UPDATE alert_deliveries SET state = 'delivered', last_status = $3,
		last_error = '', finished = $4, lease_until = 0, claim = ''
		WHERE id = $1 AND claim = $2 AND claim <> '' AND state = 'pending'`, id, claim, status, s.now().UnixNano())
}

// RetryAlertDelivery makes a delivery due again later.
func (s *Postgres) RetryAlertDelivery(ctx context.Context, id, claim string, at time.Time, status int, lastErr string) error {
	return s.execClaimed(ctx, "retrying an alert", "alert delivery", `UPDATE alert_deliveries SET next_attempt = $3, last_status = $4, last_error = $5,
		lease_until = 0, claim = '' WHERE id = $1 AND claim = $2 AND claim <> '' AND state = 'pending'`,
		id, claim, at.UnixNano(), status, ledger.TruncateUTF8(lastErr, 512))
}

// GiveUpAlertDelivery ends a delivery as failed.
func (s *Postgres) GiveUpAlertDelivery(ctx context.Context, id, claim string, status int, lastErr string) error {
	return s.execClaimed(ctx, "giving up an alert", "alert delivery", `UPDATE alert_deliveries SET state = 'failed', last_status = $3, last_error = $4,
		finished = $5, lease_until = 0, claim = '' WHERE id = $1 AND claim = $2 AND claim <> '' AND state = 'pending'`,
		id, claim, status, ledger.TruncateUTF8(lastErr, 512), s.now().UnixNano())
}

// ListAlertDeliveries lists the account's deliveries, newest first.
func (s *Postgres) ListAlertDeliveries(ctx context.Context, accountID string, limit int) ([]ledger.AlertDelivery, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	rows, _ := s.pool.Query(qctx, `SELECT `+pgAlertCols+` FROM alert_deliveries d WHERE d.account_id = $1
		ORDER BY d.created DESC, d.id DESC LIMIT $2`, accountID, limit)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.AlertDelivery, error) {
		var r alertRow
		err := row.Scan(r.dest()...)
		d := r.delivery()
		d.Claim = ""
		return d, err
	})
	if err != nil {
		return nil, pgErr(ctx, "listing alert deliveries", err)
	}
	if out == nil {
		out = []ledger.AlertDelivery{}
	}
	return out, nil
}

// AlertAccounts lists the accounts with an endpoint subscribed to one of kinds.
func (s *Postgres) AlertAccounts(ctx context.Context, kinds []string, after string, limit int) ([]string, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if kinds == nil {
		kinds = []string{}
	}
	rows, _ := s.pool.Query(qctx, `SELECT DISTINCT account_id FROM alert_endpoints
		WHERE account_id > $1 AND (kinds = '{}' OR kinds && $2::text[]) ORDER BY account_id LIMIT $3`, after, kinds, limit)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, pgErr(ctx, "listing accounts with alerts", err)
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}

// NoteAlert marks an occurrence as raised: one upsert that takes over only a mark past its until.
func (s *Postgres) NoteAlert(ctx context.Context, accountID, key string, until time.Time) (bool, error) {
	if err := ledger.CheckAlertNote(key); err != nil {
		return false, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	var u int64
	if !until.IsZero() {
		u = until.UnixNano()
	}
	tag, err := s.pool.Exec(wctx, `INSERT INTO alert_notes (account_id, key, until) VALUES ($1, $2, $3)
		ON CONFLICT (account_id, key) DO UPDATE SET until = EXCLUDED.until
		WHERE alert_notes.until <> 0 AND alert_notes.until <= $4`, accountID, key, u, s.now().UnixNano())
	if err != nil {
		return false, pgErr(ctx, "noting an alert", err)
	}
	return tag.RowsAffected() == 1, nil
}
