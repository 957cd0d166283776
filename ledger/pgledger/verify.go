package pgledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// Verify and Backup of the PostgreSQL engine.

// pgLongTimeout bounds the calls that read the whole ledger (Verify, CopyLedger) instead of the
// query timeout, when their caller sets no deadline of its own.
const pgLongTimeout = 10 * time.Minute

// pgLongContext bounds a call that reads or writes the whole ledger: by the caller's deadline
// when it has one (ledger migrate gives a copy of 50 million entries what it needs), else by
// pgLongTimeout.
func pgLongContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, pgLongTimeout)
}

// pgLongStatements lets the statements of tx run until ctx's deadline (pgLongTimeout without
// one) instead of the query timeout (the connections' statement_timeout).
func pgLongStatements(ctx context.Context, tx pgx.Tx) error {
	d := pgLongTimeout
	if dl, ok := ctx.Deadline(); ok {
		d = max(time.Until(dl), time.Millisecond)
	}
	_, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL statement_timeout = %d", d.Milliseconds()))
	return err
}

// pgVerifyAccount is one account's stored figures and what its entries add up to.
type pgVerifyAccount struct {
	stored  [4]int64 // balance, held, test_balance, test_held
	nextSeq int64
	// reversed is the stored count of credits that refunds and disputes took and did not give
	// back (the floor of the live available figure).
	reversed int64
	sums     map[ledger.Mode]*ledger.ModeSums
	lastSeq  int64
	flagged  map[string]bool // problem kinds reported once per account
}

// verifyBatch is how many accounts Verify holds at once (their stored figures and sums); a
// test makes it small to cross batches.
var verifyBatch = 1000

// Verify recomputes every account's figures from its entries, in one consistent snapshot (a
// repeatable-read transaction, so other calls go on meanwhile), and reports each difference
// with the stored figures, every negative balance or available figure, entries whose
// balance_after/available_after or numbering are wrong, holds whose entries disagree with them
// or that were held or resolved more than once, and open holds long past their expiry (two sweep
// intervals, at least a minute).
//
// It reads the accounts in id order, verifyBatch at a time, with their entries and open holds,
// so what it keeps is one batch and the problems, however many accounts there are; the checks
// of the holds against the entries run in the database and return only what is wrong.
func (s *Postgres) Verify(ctx context.Context) (ledger.VerifyReport, error) {
	return s.VerifyProgress(ctx, nil)
}

// VerifyProgress is Verify that reports the accounts it has verified of those there are
// (ledger.ProgressVerifier), after each batch.
func (s *Postgres) VerifyProgress(ctx context.Context, progress ledger.ProgressFunc) (ledger.VerifyReport, error) {
	if progress == nil {
		progress = func(int64, int64) {}
	}
	if err := s.life.Begin(); err != nil {
		return ledger.VerifyReport{}, err
	}
	defer s.life.End()
	rep := ledger.VerifyReport{Problems: []ledger.Problem{}}
	add := func(acct, kind, format string, args ...any) {
		rep.Problems = append(rep.Problems, ledger.Problem{AccountID: acct, Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	grace := max(s.opts.SweepInterval*2, time.Minute)
	cutoff := s.now().Add(-grace).UnixNano()
	qctx, cancel := pgLongContext(ctx)
	defer cancel()
	err := pgx.BeginTxFunc(qctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := pgLongStatements(qctx, tx); err != nil {
			return err
		}
		var total int64
		if err := tx.QueryRow(qctx, `SELECT count(*) FROM accounts`).Scan(&total); err != nil {
			return err
		}
		progress(0, total)
		// Each batch covers the ids after the previous batch's last (lo) up to its own last (hi);
		// the last batch has no end, so that every entry and hold is read once, also one whose
		// account does not exist.
		var lo *string
		for {
			ids, accts, err := verifyLoadAccounts(qctx, tx, lo, verifyBatch)
			if err != nil {
				return err
			}
			var hi *string
			if len(ids) == verifyBatch {
				hi = &ids[len(ids)-1]
			}
			rep.Accounts += len(ids)
			n, err := verifyEntries(qctx, tx, lo, hi, accts, add)
			if err != nil {
				return err
			}
			rep.Entries += n
			open, err := verifyOpenCounts(qctx, tx, lo, hi)
			if err != nil {
				return err
			}
			for _, id := range ids {
				verifyFigures(id, accts[id], open[id], add)
			}
			progress(int64(rep.Accounts), total)
			if hi == nil {
				break
			}
			lo = hi
		}
		if err := verifyHolds(qctx, tx, cutoff, add); err != nil {
			return err
		}
		if err := verifyCodes(qctx, tx, add); err != nil {
			return err
		}
		return verifyLots(qctx, tx, add)
	})
	if err != nil {
		return ledger.VerifyReport{}, pgErr(ctx, "verifying ledger", err)
	}
	sort.SliceStable(rep.Problems, func(i, j int) bool { return rep.Problems[i].AccountID < rep.Problems[j].AccountID })
	rep.OK = len(rep.Problems) == 0
	return rep, nil
}

// verifyRange is the SQL condition on col (an account id) of the ids after lo up to hi, hi
// included (no bound where nil), its arguments numbered from $1.
func verifyRange(col string, lo, hi *string) (string, []any) {
	var conds []string
	var args []any
	if lo != nil {
		args = append(args, *lo)
		conds = append(conds, fmt.Sprintf("%s > $%d", col, len(args)))
	}
	if hi != nil {
		args = append(args, *hi)
		conds = append(conds, fmt.Sprintf("%s <= $%d", col, len(args)))
	}
	if len(conds) == 0 {
		return "TRUE", nil
	}
	return strings.Join(conds, " AND "), args
}

// verifyLoadAccounts reads up to n accounts after lo (from the first when nil), in id order.
func verifyLoadAccounts(ctx context.Context, tx pgx.Tx, lo *string, n int) ([]string, map[string]*pgVerifyAccount, error) {
	cond, args := verifyRange("id", lo, nil)
	rows, _ := tx.Query(ctx, `SELECT id, balance, held, test_balance, test_held, next_seq, reversed FROM accounts
		WHERE `+cond+fmt.Sprintf(` ORDER BY id LIMIT %d`, n), args...)
	ids := make([]string, 0, n)
	accts := make(map[string]*pgVerifyAccount, n)
	var id string
	var a pgVerifyAccount
	_, err := pgx.ForEachRow(rows, []any{&id, &a.stored[0], &a.stored[1], &a.stored[2], &a.stored[3], &a.nextSeq, &a.reversed}, func() error {
		c := a
		c.sums = map[ledger.Mode]*ledger.ModeSums{ledger.Live: {}, ledger.Test: {}}
		c.flagged = map[string]bool{}
		ids = append(ids, id)
		accts[id] = &c
		return nil
	})
	return ids, accts, err
}

// verifyEntries replays, in (account, seq) order, the entries of the accounts after lo up to
// hi (accts, the accounts of that range that exist) and returns how many there are.
func verifyEntries(ctx context.Context, tx pgx.Tx, lo, hi *string, accts map[string]*pgVerifyAccount, add func(acct, kind, format string, args ...any)) (int, error) {
	cond, args := verifyRange("account_id", lo, hi)
	rows, _ := tx.Query(ctx, `SELECT account_id, seq, kind, mode, amount, balance_after, available_after, reason, credits FROM entries
		WHERE `+cond+` ORDER BY account_id, seq`, args...)
	var id string
	var seq, amount, balAfter, availAfter, credits int64
	var kind ledger.EntryKind
	var mode ledger.Mode
	var reason string
	n := 0
	_, err := pgx.ForEachRow(rows, []any{&id, &seq, &kind, &mode, &amount, &balAfter, &availAfter, &reason, &credits}, func() error {
		n++
		a := accts[id]
		if a == nil {
			add(id, "orphan_entries", "entry %d of an account that does not exist", seq)
			return nil
		}
		once := func(kind, format string, args ...any) {
			if !a.flagged[kind] {
				a.flagged[kind] = true
				add(id, kind, format, args...)
			}
		}
		if seq != a.lastSeq+1 {
			once("seq_gap", "entry %d follows entry %d", seq, a.lastSeq)
		}
		a.lastSeq = seq
		ms := a.sums[mode]
		if ms == nil {
			once("corrupt_record", "entry %d has mode %q", seq, mode)
			return nil
		}
		ms.Apply(ledger.Entry{Kind: kind, Amount: amount, Reason: reason, Credits: credits})
		negBal, negAv := ms.Negative()
		if negBal {
			once("negative_balance", "%s balance is %d after entry %d", mode, ms.Bal, seq)
		}
		if negAv {
			once("negative_available", "%s available is %d after entry %d", mode, ms.Bal-ms.Open, seq)
		}
		if balAfter != ms.Bal || availAfter != ms.Bal-ms.Open {
			once("entry_mismatch", "entry %d records balance %d / available %d, the entries before it give %d / %d",
				seq, balAfter, availAfter, ms.Bal, ms.Bal-ms.Open)
		}
		return nil
	})
	return n, err
}

// verifyOpenCounts sums the credits of the open holds per account and mode of the accounts
// after lo up to hi.
func verifyOpenCounts(ctx context.Context, tx pgx.Tx, lo, hi *string) (map[string]map[ledger.Mode]int64, error) {
	cond, args := verifyRange("account_id", lo, hi)
	rows, _ := tx.Query(ctx, `SELECT account_id, mode, sum(credits)::bigint FROM holds WHERE state = 'open' AND `+cond+` GROUP BY 1, 2`, args...)
	open := map[string]map[ledger.Mode]int64{}
	var id string
	var mode ledger.Mode
	var n int64
	_, err := pgx.ForEachRow(rows, []any{&id, &mode, &n}, func() error {
		if open[id] == nil {
			open[id] = map[ledger.Mode]int64{}
		}
		open[id][mode] = n
		return nil
	})
	return open, err
}

// verifyFigures compares an account's stored figures and open holds with its entries.
func verifyFigures(id string, a *pgVerifyAccount, open map[ledger.Mode]int64, add func(acct, kind, format string, args ...any)) {
	live, test := a.sums[ledger.Live], a.sums[ledger.Test]
	if a.stored[0] != live.Bal || a.stored[2] != test.Bal {
		add(id, "balance_mismatch", "stored balance %d / test %d, entries sum to %d / %d", a.stored[0], a.stored[2], live.Bal, test.Bal)
	}
	if a.reversed != live.Reversed {
		add(id, "balance_mismatch", "stored reversed credits %d, refunds and disputes in the entries took %d", a.reversed, live.Reversed)
	}
	if a.stored[1] != live.Open || a.stored[3] != test.Open {
		add(id, "open_hold_mismatch", "stored held credits %d / test %d, the entries leave %d / %d held", a.stored[1], a.stored[3], live.Open, test.Open)
	}
	for _, m := range []ledger.Mode{ledger.Live, ledger.Test} {
		if got := open[m]; got != a.sums[m].Open {
			add(id, "open_hold_mismatch", "the open %[2]s holds hold %[1]d credits, the entries leave %[3]d held", got, m, a.sums[m].Open)
		}
	}
	if a.stored[0]-a.stored[1] < -live.Reversed || a.stored[2]-a.stored[3] < 0 {
		add(id, "negative_available", "stored available %d, test %d", a.stored[0]-a.stored[1], a.stored[2]-a.stored[3])
	}
	if a.nextSeq != a.lastSeq+1 {
		add(id, "seq_gap", "stored next entry number %d, the last entry is %d", a.nextSeq, a.lastSeq)
	}
}

// verifyHolds checks the holds against the entries, in the database.
func verifyHolds(ctx context.Context, tx pgx.Tx, cutoff int64, add func(acct, kind, format string, args ...any)) error {
	checks := []struct {
		kind, detail, sql string
		args              []any
	}{
		{"hold_without_entry", "hold %q (%s) has no hold entry at its number", `
			SELECT h.account_id, h.request_id, h.state FROM holds h
			LEFT JOIN entries e ON e.account_id = h.account_id AND e.seq = h.hold_seq
			WHERE e.seq IS NULL OR e.kind <> 'hold' OR e.request_id <> h.request_id OR e.mode <> h.mode`, nil},
		{"hold_resolution_mismatch", "hold %q (%s) has no matching settle or void entry at its number", `
			SELECT h.account_id, h.request_id, h.state FROM holds h
			LEFT JOIN entries e ON e.account_id = h.account_id AND e.seq = h.resolve_seq
			WHERE h.state <> 'open' AND (e.seq IS NULL OR e.request_id <> h.request_id
				OR e.kind <> CASE h.state WHEN 'settled' THEN 'settle' ELSE 'void' END)`, nil},
		{"hold_resolved_twice", "request %q was held or resolved more than once (%s)", `
			SELECT account_id, request_id, count(*) FILTER (WHERE kind = 'hold') || ' holds, ' ||
				count(*) FILTER (WHERE kind <> 'hold') || ' resolutions'
			FROM entries WHERE kind IN ('hold', 'settle', 'void') GROUP BY 1, 2
			HAVING count(*) FILTER (WHERE kind = 'hold') <> 1 OR count(*) FILTER (WHERE kind = 'settle') > 1
				OR count(*) FILTER (WHERE kind = 'void') > 1
				OR count(*) FILTER (WHERE kind = 'settle' AND reason <> '` + ledger.SettledLateReason + `') +
					count(*) FILTER (WHERE kind = 'void') > 1`, nil},
		{"expired_open_hold", "hold %q expired at %s and is still open", `
			SELECT account_id, request_id, to_char(to_timestamp(expires / 1e9) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
			FROM holds WHERE state = 'open' AND expires < $1`, []any{cutoff}},
	}
	for _, c := range checks {
		rows, _ := tx.Query(ctx, c.sql, c.args...)
		var id, rid, what string
		if _, err := pgx.ForEachRow(rows, []any{&id, &rid, &what}, func() error {
			add(id, c.kind, c.detail, rid, what)
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// Backup is not done by the ledger on PostgreSQL: the database's own tools make consistent,
// online backups (pg_dump for a logical copy, pg_basebackup with WAL archiving for
// point-in-time recovery) and restore them, and they are what a PostgreSQL operator runs.
func (s *Postgres) Backup(ctx context.Context, w io.Writer) error {
	if err := s.life.Begin(); err != nil {
		return err
	}
	defer s.life.End()
	return fmt.Errorf("backing up ledger: the PostgreSQL ledger is backed up with PostgreSQL's own tools "+
		"(pg_dump for a logical backup, pg_basebackup and WAL archiving for point-in-time recovery), not by Caddy: %w",
		errors.ErrUnsupported)
}

// Interface guards
var _ ledger.ProgressVerifier = (*Postgres)(nil)

// verifyCodes checks every redemption code (codes.go) against its redemptions, which one
// transaction writes with the use and the account's grant entry: the uses are the redemptions
// counted, and each redemption's account has its grant entry.
func verifyCodes(ctx context.Context, tx pgx.Tx, add func(acct, kind, format string, args ...any)) error {
	rows, _ := tx.Query(ctx, `SELECT c.id, c.uses, c.max_uses, count(r.account_id) FROM redemption_codes c
		LEFT JOIN code_redemptions r ON r.code_id = c.id GROUP BY c.id HAVING c.uses <> count(r.account_id) OR c.uses > c.max_uses`)
	var id string
	var uses, maxUses, n int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &uses, &maxUses, &n}, func() error {
		add("", "code_uses", "code %s counts %d uses of %d; %d accounts redeemed it", id, uses, maxUses, n)
		return nil
	}); err != nil {
		return err
	}
	rows, _ = tx.Query(ctx, `SELECT r.code_id, r.account_id FROM code_redemptions r WHERE NOT EXISTS (SELECT FROM entries e
		WHERE e.account_id = r.account_id AND e.reference = 'code:' || r.code_id AND e.reference <> '')`)
	var acct string
	_, err := pgx.ForEachRow(rows, []any{&id, &acct}, func() error {
		add(acct, "code_redemption", "redeemed code %s without its grant entry", id)
		return nil
	})
	return err
}

// verifyLots checks the credits that expire (migrations/00018) with ledger.LotProblems: each
// lot against the takes of its open holds, and what expire entries took of each lot against
// what its grant gave. A take of a hold that is not open is a problem of its own.
func verifyLots(ctx context.Context, tx pgx.Tx, add func(acct, kind, format string, args ...any)) error {
	type acctLots struct {
		lots                   []ledger.Lot
		held, expired, granted map[uint64]int64
	}
	all := map[string]*acctLots{}
	of := func(id string) *acctLots {
		a := all[id]
		if a == nil {
			a = &acctLots{held: map[uint64]int64{}, expired: map[uint64]int64{}, granted: map[uint64]int64{}}
			all[id] = a
		}
		return a
	}
	var id string
	var l ledger.Lot
	var exp int64
	rows, _ := tx.Query(ctx, `SELECT account_id, seq, amount, remaining, held, expires FROM lots ORDER BY account_id, expires, seq`)
	if _, err := pgx.ForEachRow(rows, []any{&id, &l.Seq, &l.Amount, &l.Remaining, &l.Held, &exp}, func() error {
		l.Expires = pgTime(exp)
		a := of(id)
		a.lots = append(a.lots, l)
		return nil
	}); err != nil {
		return err
	}
	var seq uint64
	var n, granted int64
	var state *string
	var rid string
	rows, _ = tx.Query(ctx, `SELECT hl.account_id, hl.request_id, hl.seq, hl.credits, h.state FROM hold_lots hl
		LEFT JOIN holds h ON h.account_id = hl.account_id AND h.request_id = hl.request_id`)
	if _, err := pgx.ForEachRow(rows, []any{&id, &rid, &seq, &n, &state}, func() error {
		if state == nil || *state != string(ledger.HoldOpen) {
			add(id, "lot_held_mismatch", "hold %q, which is not open, still holds %d credits of the lot of entry %d", rid, n, seq)
			return nil
		}
		of(id).held[seq] += n
		return nil
	}); err != nil {
		return err
	}
	var lot *int64
	rows, _ = tx.Query(ctx, `SELECT x.account_id, x.lot, x.expired, coalesce(g.amount, 0) FROM (
			SELECT account_id, substring(reason from '^credits of entry ([0-9]+) expired$')::bigint AS lot, -sum(amount) AS expired
			FROM entries WHERE kind = 'expire' GROUP BY 1, 2) x
		LEFT JOIN entries g ON g.account_id = x.account_id AND g.seq = x.lot AND g.mode = 'live' AND g.kind IN ('grant', 'purchase')`)
	if _, err := pgx.ForEachRow(rows, []any{&id, &lot, &n, &granted}, func() error {
		if lot == nil {
			add(id, "corrupt_record", "expire entries of %d credits name no lot", n)
			return nil
		}
		a := of(id)
		a.expired[uint64(*lot)] += n
		a.granted[uint64(*lot)] = granted
		return nil
	}); err != nil {
		return err
	}
	for id, a := range all {
		for _, p := range ledger.LotProblems(id, a.lots, a.held, a.expired, a.granted) {
			add(p.AccountID, p.Kind, "%s", p.Detail)
		}
	}
	return nil
}
