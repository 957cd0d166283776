package pgledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// Automatic top-ups in the PostgreSQL engine (migrations/00020_topups.sql), shared by every
// instance. Each change of a rule or a top-up is one transaction that locks the account's rule
// row first: BeginTopUp reads the account's top-ups and inserts the pending one under that lock,
// so of instances racing, one inserts and the others find it pending. The unique partial index
// topups_one_pending backs this up.

const (
	pgRuleCols  = "account_id, customer_id, payment_method_id, card_brand, card_last4, threshold, package, monthly_cap, enabled, paused, paused_why, updated"
	pgTopUpCols = "id, account_id, month, status, package, payment_intent, detail, created, updated"
)

func scanRule(row pgx.CollectableRow) (ledger.TopUpRule, error) {
	var r ledger.TopUpRule
	var updated int64
	err := row.Scan(&r.AccountID, &r.Card.CustomerID, &r.Card.PaymentMethodID, &r.Card.Brand, &r.Card.Last4,
		&r.Threshold, &r.Package, &r.MonthlyCap, &r.Enabled, &r.Paused, &r.PausedWhy, &updated)
	r.Updated = pgTime(updated)
	return r, err
}

func scanTopUp(row pgx.CollectableRow) (ledger.TopUp, error) {
	var t ledger.TopUp
	var created, updated int64
	err := row.Scan(&t.ID, &t.AccountID, &t.Month, &t.Status, &t.Package, &t.PaymentIntent, &t.Detail, &created, &updated)
	t.Created, t.Updated = pgTime(created), pgTime(updated)
	return t, err
}

// SaveTopUpCard stores the account's card and unpauses its rule.
func (s *Postgres) SaveTopUpCard(ctx context.Context, accountID string, c ledger.TopUpCard) (ledger.TopUpRule, error) {
	if err := ledger.CheckTopUpCard(c); err != nil {
		return ledger.TopUpRule{}, err
	}
	if err := pgStorable("card", c.CustomerID, c.PaymentMethodID, c.Brand, c.Last4); err != nil {
		return ledger.TopUpRule{}, err
	}
	return s.upsertRule(ctx, accountID, `INSERT INTO topup_rules (account_id, customer_id, payment_method_id, card_brand, card_last4, updated)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (account_id) DO UPDATE SET customer_id = $2, payment_method_id = $3, card_brand = $4, card_last4 = $5,
			paused = false, paused_why = '', updated = $6
		RETURNING `+pgRuleCols, accountID, c.CustomerID, c.PaymentMethodID, c.Brand, c.Last4, s.now().UnixNano())
}

// SetTopUpRule saves the account's settings.
func (s *Postgres) SetTopUpRule(ctx context.Context, accountID string, st ledger.TopUpSettings) (ledger.TopUpRule, error) {
	if err := ledger.CheckTopUpSettings(st); err != nil {
		return ledger.TopUpRule{}, err
	}
	if err := pgStorable("package", st.Package); err != nil {
		return ledger.TopUpRule{}, err
	}
	return s.upsertRule(ctx, accountID, `INSERT INTO topup_rules (account_id, threshold, package, monthly_cap, enabled, updated)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (account_id) DO UPDATE SET threshold = $2, package = $3, monthly_cap = $4, enabled = $5, updated = $6
		RETURNING `+pgRuleCols, accountID, st.Threshold, st.Package, st.MonthlyCap, st.Enabled, s.now().UnixNano())
}

// upsertRule runs an insert-or-update of the account's rule.
func (s *Postgres) upsertRule(ctx context.Context, accountID, sql string, args ...any) (ledger.TopUpRule, error) {
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.TopUpRule{}, err
	}
	defer done()
	rows, _ := s.pool.Query(wctx, sql, args...)
	r, err := pgx.CollectExactlyOneRow(rows, scanRule)
	if err != nil {
		if pgForeignKey(err) {
			return ledger.TopUpRule{}, fmt.Errorf("account %q: %w", accountID, ledger.ErrNotFound)
		}
		return ledger.TopUpRule{}, pgErr(ctx, "saving a top-up rule", err)
	}
	return r, nil
}

// PauseTopUp pauses the account's rule.
func (s *Postgres) PauseTopUp(ctx context.Context, accountID, why string) (ledger.TopUpRule, error) {
	if err := ledger.CheckString("reason", why, 512, true); err != nil {
		return ledger.TopUpRule{}, err
	}
	if err := pgStorable("reason", why); err != nil {
		return ledger.TopUpRule{}, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.TopUpRule{}, err
	}
	defer done()
	rows, _ := s.pool.Query(wctx, `UPDATE topup_rules SET paused = true, paused_why = $2, updated = $3
		WHERE account_id = $1 RETURNING `+pgRuleCols, accountID, why, s.now().UnixNano())
	r, ok, err := pgOne(rows, nil, scanRule)
	switch {
	case err != nil:
		return ledger.TopUpRule{}, pgErr(ctx, "pausing a top-up rule", err)
	case !ok:
		return ledger.TopUpRule{}, fmt.Errorf("top-up rule of %q: %w", accountID, ledger.ErrNotFound)
	}
	return r, nil
}

// TopUpRule returns the account's rule.
func (s *Postgres) TopUpRule(ctx context.Context, accountID string) (ledger.TopUpRule, error) {
	qctx, done, err := s.read(ctx)
	if err != nil {
		return ledger.TopUpRule{}, err
	}
	defer done()
	rows, _ := s.pool.Query(qctx, `SELECT `+pgRuleCols+` FROM topup_rules WHERE account_id = $1`, accountID)
	r, ok, err := pgOne(rows, nil, scanRule)
	switch {
	case err != nil:
		return ledger.TopUpRule{}, pgErr(ctx, "reading a top-up rule", err)
	case !ok:
		return ledger.TopUpRule{}, fmt.Errorf("top-up rule of %q: %w", accountID, ledger.ErrNotFound)
	}
	return r, nil
}

// ActiveTopUpRules lists the rules that may top up.
func (s *Postgres) ActiveTopUpRules(ctx context.Context) ([]ledger.TopUpRule, error) {
	return readList(s, ctx, "listing top-up rules", scanRule, `SELECT `+pgRuleCols+` FROM topup_rules
		WHERE enabled AND NOT paused AND payment_method_id <> '' AND threshold > 0 AND package <> ''`)
}

// BeginTopUp makes a pending top-up where the rule allows one.
func (s *Postgres) BeginTopUp(ctx context.Context, accountID string) (ledger.TopUp, error) {
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.TopUp{}, err
	}
	defer done()
	var t ledger.TopUp
	err = pgx.BeginFunc(wctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(wctx, `SELECT `+pgRuleCols+` FROM topup_rules WHERE account_id = $1 FOR UPDATE`, accountID)
		r, ok, err := pgOne(rows, err, scanRule)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("top-up rule of %q: %w", accountID, ledger.ErrNotFound)
		}
		at := s.now().UTC()
		month := ledger.TopUpMonth(at)
		rows, _ = tx.Query(wctx, `SELECT `+pgTopUpCols+` FROM topups
			WHERE account_id = $1 AND (status = 'pending' OR month = $2)`, accountID, month)
		ts, err := pgx.CollectRows(rows, scanTopUp)
		if err != nil {
			return err
		}
		if err := ledger.CheckBeginTopUp(r, ts, month); err != nil {
			return err
		}
		rows, _ = tx.Query(wctx, `INSERT INTO topups (id, account_id, month, status, package, created, updated)
			VALUES ($1, $2, $3, 'pending', $4, $5, $5) RETURNING `+pgTopUpCols,
			ledger.NewTopUpID(), accountID, month, r.Package, at.UnixNano())
		t, err = pgx.CollectExactlyOneRow(rows, scanTopUp)
		return err
	})
	if err != nil {
		if errors.Is(err, ledger.ErrTopUpRefused) || errors.Is(err, ledger.ErrNotFound) {
			return ledger.TopUp{}, err
		}
		return ledger.TopUp{}, pgErr(ctx, "beginning a top-up", err)
	}
	return t, nil
}

// SetTopUpPaymentIntent records the top-up's payment.
func (s *Postgres) SetTopUpPaymentIntent(ctx context.Context, id, paymentIntent string) (ledger.TopUp, error) {
	if err := ledger.CheckTopUpRef("top-up id", id); err != nil {
		return ledger.TopUp{}, err
	}
	if err := ledger.CheckTopUpRef("payment intent", paymentIntent); err != nil {
		return ledger.TopUp{}, err
	}
	if err := pgStorable("payment intent", id, paymentIntent); err != nil {
		return ledger.TopUp{}, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.TopUp{}, err
	}
	defer done()
	rows, _ := s.pool.Query(wctx, `UPDATE topups SET payment_intent = $2, updated = $3 WHERE id = $1 RETURNING `+pgTopUpCols,
		id, paymentIntent, s.now().UnixNano())
	t, ok, err := pgOne(rows, nil, scanTopUp)
	switch {
	case err != nil:
		return ledger.TopUp{}, pgErr(ctx, "recording a top-up's payment", err)
	case !ok:
		return ledger.TopUp{}, fmt.Errorf("top-up %q: %w", id, ledger.ErrNotFound)
	}
	return t, nil
}

// FinishTopUp moves the top-up to status, pausing the rule where it failed.
func (s *Postgres) FinishTopUp(ctx context.Context, id, status, detail string) (ledger.TopUp, bool, error) {
	if err := ledger.CheckTopUpRef("top-up id", id); err != nil {
		return ledger.TopUp{}, false, err
	}
	if err := ledger.CheckTopUpStatus(status, detail); err != nil {
		return ledger.TopUp{}, false, err
	}
	if err := pgStorable("detail", id, detail); err != nil {
		return ledger.TopUp{}, false, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.TopUp{}, false, err
	}
	defer done()
	var t ledger.TopUp
	changed := false
	err = pgx.BeginFunc(wctx, s.pool, func(tx pgx.Tx) error {
		changed = false
		var acct string
		err := tx.QueryRow(wctx, `SELECT account_id FROM topups WHERE id = $1`, id).Scan(&acct)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("top-up %q: %w", id, ledger.ErrNotFound)
		}
		if err != nil {
			return err
		}
		// The rule's row first, as BeginTopUp locks it.
		if _, err := tx.Exec(wctx, `SELECT FROM topup_rules WHERE account_id = $1 FOR UPDATE`, acct); err != nil {
			return err
		}
		rows, err := tx.Query(wctx, `SELECT `+pgTopUpCols+` FROM topups WHERE id = $1 FOR UPDATE`, id)
		cur, _, err := pgOne(rows, err, scanTopUp)
		if err != nil {
			return err
		}
		t = cur
		if !ledger.TopUpMove(cur.Status, status) {
			return nil
		}
		at := s.now().UnixNano()
		rows, _ = tx.Query(wctx, `UPDATE topups SET status = $2, detail = $3, updated = $4 WHERE id = $1 RETURNING `+pgTopUpCols,
			id, status, detail, at)
		if t, err = pgx.CollectExactlyOneRow(rows, scanTopUp); err != nil {
			return err
		}
		changed = true
		if ledger.TopUpPauses(status) {
			why := detail
			if why == "" {
				why = "the top-up " + id + " " + status
			}
			_, err = tx.Exec(wctx, `UPDATE topup_rules SET paused = true, paused_why = $2, updated = $3 WHERE account_id = $1`,
				acct, why, at)
		}
		return err
	})
	if err != nil {
		if errors.Is(err, ledger.ErrNotFound) {
			return ledger.TopUp{}, false, err
		}
		return ledger.TopUp{}, false, pgErr(ctx, "finishing a top-up", err)
	}
	return t, changed, nil
}

// GetTopUp returns the top-up of id.
func (s *Postgres) GetTopUp(ctx context.Context, id string) (ledger.TopUp, error) {
	if err := ledger.CheckTopUpRef("top-up id", id); err != nil {
		return ledger.TopUp{}, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return ledger.TopUp{}, err
	}
	defer done()
	rows, _ := s.pool.Query(qctx, `SELECT `+pgTopUpCols+` FROM topups WHERE id = $1`, id)
	t, ok, err := pgOne(rows, nil, scanTopUp)
	switch {
	case err != nil:
		return ledger.TopUp{}, pgErr(ctx, "reading a top-up", err)
	case !ok:
		return ledger.TopUp{}, fmt.Errorf("top-up %q: %w", id, ledger.ErrNotFound)
	}
	return t, nil
}

// ListTopUps lists top-ups newest first.
func (s *Postgres) ListTopUps(ctx context.Context, accountID string, limit int) ([]ledger.TopUp, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	// Newest first, by id among those of one time: Badger's order (compareTopUps).
	return readList(s, ctx, "listing top-ups", scanTopUp, `SELECT `+pgTopUpCols+` FROM topups
		WHERE $1 = '' OR account_id = $1 ORDER BY created DESC, id LIMIT $2`, accountID, limit)
}
