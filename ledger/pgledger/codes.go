package pgledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// Redemption codes in the PostgreSQL engine (migrations/00017_redemption_codes.sql), shared
// by every instance. A redemption is one transaction that locks the account's row first (as
// every change of its credits does, so it is ordered with holds and grants on any instance and
// never waits for a code while a batch waits for it), then the code's row: of instances racing
// for the last use of a code, one takes it and the others find it used up on current data. The
// primary key of code_redemptions (one row per code and account), the CHECK that uses never
// passes max_uses and the unique grant reference of the entry each back this up.

const pgCodeCols = "id, last4, credits, max_uses, uses, expires, note, created, disabled"

func scanCode(row pgx.CollectableRow) (ledger.RedemptionCode, error) {
	var c ledger.RedemptionCode
	var created int64
	var expires, disabled *int64
	err := row.Scan(&c.ID, &c.Last4, &c.Credits, &c.MaxUses, &c.Uses, &expires, &c.Note, &created, &disabled)
	c.Created, c.Expires, c.Disabled = pgTime(created), pgTimeOrZero(expires), pgTimeOrZero(disabled)
	return c, err
}

// CreateCode stores a new code and returns it in full, once.
func (s *Postgres) CreateCode(ctx context.Context, n ledger.NewCode) (string, ledger.RedemptionCode, error) {
	n, err := ledger.CheckNewCode(n, s.now())
	if err != nil {
		return "", ledger.RedemptionCode{}, err
	}
	if err := pgStorable("note", n.Note); err != nil {
		return "", ledger.RedemptionCode{}, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return "", ledger.RedemptionCode{}, err
	}
	defer done()
	code := ledger.MakeCode()
	norm, _ := ledger.NormalizeCode(code)
	d := ledger.CodeDigest(norm)
	var expires *int64
	if !n.Expires.IsZero() {
		e := n.Expires.UnixNano()
		expires = &e
	}
	rows, _ := s.pool.Query(wctx, `INSERT INTO redemption_codes (id, digest, last4, credits, max_uses, expires, note, created)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING `+pgCodeCols,
		ledger.NewCodeID(), d[:], ledger.CodeLast4(norm), n.Credits, n.MaxUses, expires, n.Note, s.now().UTC().UnixNano())
	c, err := pgx.CollectExactlyOneRow(rows, scanCode)
	if err != nil {
		return "", ledger.RedemptionCode{}, pgErr(ctx, "creating a code", err)
	}
	return code, c, nil
}

// ListCodes lists codes newest first.
func (s *Postgres) ListCodes(ctx context.Context, limit int) ([]ledger.RedemptionCode, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	return readList(s, ctx, "listing codes", scanCode, `SELECT `+pgCodeCols+` FROM redemption_codes ORDER BY created DESC, id LIMIT $1`, limit)
}

// GetCode returns the code with id.
func (s *Postgres) GetCode(ctx context.Context, id string) (ledger.RedemptionCode, error) {
	if err := ledger.CheckCodeID(id); err != nil {
		return ledger.RedemptionCode{}, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return ledger.RedemptionCode{}, err
	}
	defer done()
	rows, err := s.pool.Query(qctx, `SELECT `+pgCodeCols+` FROM redemption_codes WHERE id = $1`, id)
	c, ok, err := pgOne(rows, err, scanCode)
	if err != nil {
		return ledger.RedemptionCode{}, pgErr(ctx, "reading a code", err)
	}
	if !ok {
		return ledger.RedemptionCode{}, fmt.Errorf("code %q: %w", id, ledger.ErrNotFound)
	}
	return c, nil
}

// DisableCode stops the code; a disabled one is returned as it is. The update is conditional
// on the code being enabled, so the first disabling time stays.
func (s *Postgres) DisableCode(ctx context.Context, id string) (ledger.RedemptionCode, error) {
	if err := ledger.CheckCodeID(id); err != nil {
		return ledger.RedemptionCode{}, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.RedemptionCode{}, err
	}
	defer done()
	if _, err := s.pool.Exec(wctx, `UPDATE redemption_codes SET disabled = $2 WHERE id = $1 AND disabled IS NULL`,
		id, s.now().UTC().UnixNano()); err != nil {
		return ledger.RedemptionCode{}, pgErr(ctx, "disabling a code", err)
	}
	rows, err := s.pool.Query(wctx, `SELECT `+pgCodeCols+` FROM redemption_codes WHERE id = $1`, id)
	c, ok, err := pgOne(rows, err, scanCode)
	if err != nil {
		return ledger.RedemptionCode{}, pgErr(ctx, "reading a code", err)
	}
	if !ok {
		return ledger.RedemptionCode{}, fmt.Errorf("code %q: %w", id, ledger.ErrNotFound)
	}
	return c, nil
}

// CodeRedemptions lists who redeemed the code, newest first.
func (s *Postgres) CodeRedemptions(ctx context.Context, id string, limit int) ([]ledger.CodeRedemption, error) {
	limit, err := ledger.CheckListLimit(limit)
	if err != nil {
		return nil, err
	}
	if _, err := s.GetCode(ctx, id); err != nil {
		return nil, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	rows, _ := s.pool.Query(qctx, `SELECT r.code_id, r.account_id, coalesce(a.email, ''), r.credits, r.seq, r.at
		FROM code_redemptions r LEFT JOIN accounts a ON a.id = r.account_id
		WHERE r.code_id = $1 ORDER BY r.at DESC, r.account_id LIMIT $2`, id, limit)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.CodeRedemption, error) {
		var r ledger.CodeRedemption
		var at int64
		err := row.Scan(&r.CodeID, &r.AccountID, &r.Email, &r.Credits, &r.Seq, &at)
		r.Time = pgTime(at)
		return r, err
	})
	if err != nil {
		return nil, pgErr(ctx, "listing redemptions", err)
	}
	if out == nil {
		out = []ledger.CodeRedemption{}
	}
	return out, nil
}

// Redeem credits the account with the code's credits, once per account and at most MaxUses
// times in all, in one transaction.
func (s *Postgres) Redeem(ctx context.Context, accountID, code string) (ledger.Redemption, error) {
	norm, ok := ledger.NormalizeCode(code)
	if !ok {
		return ledger.Redemption{}, ledger.ErrCodeUnknown
	}
	if err := pgStorable("account id", accountID); err != nil {
		return ledger.Redemption{}, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.Redemption{}, err
	}
	defer done()
	d := ledger.CodeDigest(norm)
	var res ledger.Redemption
	err = pgx.BeginFunc(wctx, s.pool, func(tx pgx.Tx) error {
		res = ledger.Redemption{}
		var status string
		err := tx.QueryRow(wctx, `SELECT status FROM accounts WHERE id = $1 FOR NO KEY UPDATE`, accountID).Scan(&status)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("account %q: %w", accountID, ledger.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if status == string(ledger.StatusDisabled) {
			return ledger.ErrAccountDisabled
		}
		rows, err := tx.Query(wctx, `SELECT `+pgCodeCols+` FROM redemption_codes WHERE digest = $1 FOR UPDATE`, d[:])
		c, ok, err := pgOne(rows, err, scanCode)
		if err != nil {
			return err
		}
		if !ok {
			return ledger.ErrCodeUnknown
		}
		// An account that redeemed the code learns that first, whatever became of the code since.
		var redeemed bool
		if err := tx.QueryRow(wctx, `SELECT EXISTS (SELECT FROM code_redemptions WHERE code_id = $1 AND account_id = $2)`,
			c.ID, accountID).Scan(&redeemed); err != nil {
			return err
		}
		if redeemed {
			return ledger.ErrAlreadyRedeemed
		}
		t := s.now().UTC()
		if err := c.Redeemable(t); err != nil {
			return err
		}
		var outcome string
		var e entryRow
		var b balanceRow
		err = tx.QueryRow(wctx, pgGrantSQL, accountID, string(ledger.Live), string(ledger.KindGrant), c.Credits,
			ledger.CodeReference(c.ID), ledger.RedeemReason, int64(0), "", t.UnixNano(), int64(0)).
			Scan(append(append([]any{&outcome}, e.dest()...), b.dest()...)...)
		if err != nil {
			return err
		}
		switch outcome {
		case "ok":
		case "repeated": // the account's grant reference: a second guard
			return ledger.ErrAlreadyRedeemed
		default:
			return fmt.Errorf("redeeming code %q: grant outcome %q", c.ID, outcome)
		}
		res.Entry, res.Balance = e.entry(), b.balance(accountID)
		if _, err := tx.Exec(wctx, `UPDATE redemption_codes SET uses = uses + 1 WHERE id = $1`, c.ID); err != nil {
			return err
		}
		if _, err := tx.Exec(wctx, `INSERT INTO code_redemptions (code_id, account_id, credits, seq, at)
			VALUES ($1, $2, $3, $4, $5)`, c.ID, accountID, c.Credits, int64(res.Entry.Seq), t.UnixNano()); err != nil {
			return err
		}
		c.Uses++
		res.Code = c
		return nil
	})
	if err != nil {
		if errors.Is(err, ledger.ErrCodeNotRedeemable) || errors.Is(err, ledger.ErrAlreadyRedeemed) ||
			errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrAccountDisabled) {
			return ledger.Redemption{}, err
		}
		if pgUniqueConstraint(err) == "code_redemptions_pkey" {
			return ledger.Redemption{}, ledger.ErrAlreadyRedeemed
		}
		return ledger.Redemption{}, pgErr(ctx, "redeeming a code", err)
	}
	return res, nil
}
