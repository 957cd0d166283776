package pgledger

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// API keys of the PostgreSQL engine. Only the key's SHA-256 digest is stored.
//
// LookupKey asks the database every time (one indexed round trip, the key joined with its
// account), with no cache: a revocation or a disabled account made through any instance is
// seen by the very next request on every instance, which a cache could only promise after its
// lifetime or an invalidation message that may be late. Only the last-use time is deferred: it
// is noted in memory and written every LastUsedFlushInterval and at Close, so a crash loses at
// most one interval of last-use times, never a revocation. ListKeys on the instance that noted
// a use shows it at once; other instances see it after the flush.

// pgKeyCols are a key's columns as keyRow reads them, from api_keys k LEFT JOIN api_key_usage u
// (pgKeyFrom).
const (
	pgKeyCols = `k.id, k.account_id, k.mode, k.name, k.prefix, k.last4, k.created, k.last_used, k.expires, k.revoked,
		k.note, k.budget_total, k.budget_day, k.budget_month, k.allowed_tools, k.allowed_cidrs, k.rolled, k.prev_last4,
		k.prev_until, coalesce(u.total, 0), coalesce(u.day, 0), coalesce(u.day_start, 0), coalesce(u.month, 0),
		coalesce(u.month_start, 0), k.member_id`
	pgKeyFrom = ` FROM api_keys k LEFT JOIN api_key_usage u ON u.key_id = k.id`
)

type keyRow struct {
	k                                             ledger.Key
	created                                       int64
	lastUsed, expires, revoked, rolled, prevUntil *int64
	dayStart, monthStart                          int64
}

func (r *keyRow) dest() []any {
	k := &r.k
	return []any{&k.ID, &k.AccountID, &k.Mode, &k.Name, &k.Prefix, &k.Last4, &r.created, &r.lastUsed, &r.expires, &r.revoked,
		&k.Note, &k.BudgetTotal, &k.BudgetDay, &k.BudgetMonth, &k.AllowedTools, &k.AllowedCIDRs, &r.rolled, &k.PreviousLast4,
		&r.prevUntil, &k.Usage.Total, &k.Usage.Day, &r.dayStart, &k.Usage.Month, &r.monthStart, &k.MemberID}
}

func (r *keyRow) key() ledger.Key {
	k := r.k
	k.Created, k.LastUsed = pgTime(r.created), pgTimeOrZero(r.lastUsed)
	k.Expires, k.Revoked = pgTimeOrZero(r.expires), pgTimeOrZero(r.revoked)
	k.Rolled, k.GraceUntil = pgTimeOrZero(r.rolled), pgTimeOrZero(r.prevUntil)
	if r.dayStart != 0 {
		k.Usage.DayStart = pgTime(r.dayStart)
	}
	if r.monthStart != 0 {
		k.Usage.MonthStart = pgTime(r.monthStart)
	}
	k.AllowedTools, k.AllowedCIDRs = ledger.NilIfEmpty(k.AllowedTools), ledger.NilIfEmpty(k.AllowedCIDRs)
	return k
}

// lastUses are the keys' last-use times noted by LookupKey and not yet written.
type lastUses struct {
	mu sync.Mutex
	m  map[string]int64 // key id -> unix nanoseconds
}

// note records a use of key id at t (unix nanoseconds).
func (l *lastUses) note(id string, t int64) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]int64{}
	}
	if t > l.m[id] {
		l.m[id] = t
	}
	l.mu.Unlock()
}

// merge gives k the later of its stored last use and a noted one.
func (l *lastUses) merge(k ledger.Key) ledger.Key {
	l.mu.Lock()
	t := l.m[k.ID]
	l.mu.Unlock()
	if t != 0 && pgTime(t).After(k.LastUsed) {
		k.LastUsed = pgTime(t)
	}
	return k
}

// take returns the noted times and forgets them; a failed write puts them back with putBack.
func (l *lastUses) take() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.m
	l.m = nil
	return m
}

func (l *lastUses) putBack(m map[string]int64) {
	for id, t := range m {
		l.note(id, t)
	}
}

// CreateKey makes a new API key for the account and returns it in full, once.
func (s *Postgres) CreateKey(ctx context.Context, accountID string, mode ledger.Mode, name string, expires time.Time) (string, ledger.Key, error) {
	return s.CreateKeyCapped(ctx, accountID, mode, name, expires, 0)
}

// CreateKeyCapped is CreateKey with a cap on the account's unrevoked keys. The count and the
// insert are one transaction under an advisory lock of the account's keys, so keys created at
// once on several instances never exceed the cap; holds on the account do not wait for it.
func (s *Postgres) CreateKeyCapped(ctx context.Context, accountID string, mode ledger.Mode, name string, expires time.Time, maxActive int) (string, ledger.Key, error) {
	t := s.now().UTC()
	expires, err := ledger.CheckKeyRequest(mode, name, expires, t)
	if err != nil {
		return "", ledger.Key{}, err
	}
	if err := pgStorable("key name", name); err != nil {
		return "", ledger.Key{}, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return "", ledger.Key{}, err
	}
	defer done()
	full := ledger.NewFullKey(mode)
	d := sha256.Sum256([]byte(full))
	k := ledger.Key{ID: ledger.NewKeyID(), AccountID: accountID, Mode: mode, Name: name, Prefix: full[:len(ledger.LivePrefix)],
		Last4: full[len(full)-4:], Created: t, Expires: expires}
	// One pipeline, so one implicit transaction: the lock is held until the insert commits.
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended('ledger keys ' || $1, 0))`, accountID)
	b.Queue(`INSERT INTO api_keys (id, account_id, digest, mode, name, prefix, last4, created, expires)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9
		WHERE $10 <= 0 OR (SELECT count(*) FROM api_keys WHERE account_id = $2 AND revoked IS NULL) < $10`,
		k.ID, k.AccountID, d[:], string(k.Mode), k.Name, k.Prefix, k.Last4, t.UnixNano(), pgNanos(expires), maxActive)
	br := s.pool.SendBatch(wctx, b)
	_, _ = br.Exec()
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case pgForeignKey(err):
		return "", ledger.Key{}, fmt.Errorf("account %q: %w", accountID, ledger.ErrNotFound)
	case err != nil:
		return "", ledger.Key{}, pgErr(ctx, "creating key", err)
	case tag.RowsAffected() == 0:
		return "", ledger.Key{}, fmt.Errorf("account %q has %d keys: %w", accountID, maxActive, ledger.ErrTooManyKeys)
	}
	return full, k, nil
}

// ListKeys returns the account's keys, oldest first, revoked ones included.
func (s *Postgres) ListKeys(ctx context.Context, accountID string) ([]ledger.Key, error) {
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	rows, _ := s.pool.Query(qctx, `SELECT `+pgKeyCols+pgKeyFrom+` WHERE k.account_id = $1 ORDER BY k.created, k.id`, accountID)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Key, error) {
		var r keyRow
		err := row.Scan(r.dest()...)
		return s.used.merge(r.key()), err
	})
	if err != nil {
		return nil, pgErr(ctx, "listing keys", err)
	}
	if len(out) == 0 {
		return []ledger.Key{}, s.mustExist(ctx, accountID)
	}
	return out, nil
}

// RevokeKey revokes a key: the next LookupKey of it, on any instance, fails.
func (s *Postgres) RevokeKey(ctx context.Context, accountID, keyID string) (ledger.Key, error) {
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.Key{}, err
	}
	defer done()
	var r keyRow
	err = s.pool.QueryRow(wctx, `WITH k AS (UPDATE api_keys SET revoked = $3 WHERE account_id = $1 AND id = $2 AND revoked IS NULL
		RETURNING *) SELECT `+pgKeyCols+` FROM k LEFT JOIN api_key_usage u ON u.key_id = k.id`,
		accountID, keyID, s.now().UTC().UnixNano()).Scan(r.dest()...)
	if err == nil {
		return s.used.merge(r.key()), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return ledger.Key{}, pgErr(ctx, "revoking key", err)
	}
	err = s.pool.QueryRow(wctx, `SELECT `+pgKeyCols+pgKeyFrom+` WHERE k.account_id = $1 AND k.id = $2`, accountID, keyID).Scan(r.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Key{}, fmt.Errorf("key %q of account %q: %w", keyID, accountID, ledger.ErrNotFound)
	}
	if err != nil {
		return ledger.Key{}, pgErr(ctx, "revoking key", err)
	}
	return s.used.merge(r.key()), ledger.ErrAlreadyRevoked
}

// LookupKey finds the key by its digest (or, within a roll's grace period, its previous one),
// with its account, in one query. Malformed, unknown and revoked keys, and a previous secret
// past its grace, all give ErrInvalidKey, with no hint which; an expired key ErrKeyExpired; a
// malformed key costs no query.
func (s *Postgres) LookupKey(ctx context.Context, presented string) (ledger.Key, ledger.Account, error) {
	k, a, _, err := s.lookupKey(ctx, presented, false)
	return k, a, err
}

// LookupKeyBalance is LookupKey with the account's credits, in the same query (ledger/roles.go).
func (s *Postgres) LookupKeyBalance(ctx context.Context, presented string) (ledger.Key, ledger.Account, ledger.Balance, error) {
	return s.lookupKey(ctx, presented, true)
}

// The query of LookupKey (the key's columns as keyRow reads them, then the account's as
// accountRow does), and of LookupKeyBalance (then the account's figures, as balanceRow does),
// made once rather than per lookup.
const (
	pgLookupKeySelect = `SELECT ` + pgKeyCols + `, k.digest = $1, ` + pgAccountColsA
	// A key is found by its secret or, after a roll, by the previous one (each a unique index).
	pgLookupKeyFrom       = pgKeyFrom + ` JOIN accounts a ON a.id = k.account_id WHERE k.digest = $1 OR k.prev_digest = $1`
	pgLookupKeySQL        = pgLookupKeySelect + pgLookupKeyFrom
	pgLookupKeyBalanceSQL = pgLookupKeySelect + `, a.balance, a.held, a.test_balance, a.test_held, a.has_lots` + pgLookupKeyFrom
)

func (s *Postgres) lookupKey(ctx context.Context, presented string, withBalance bool) (ledger.Key, ledger.Account, ledger.Balance, error) {
	qctx, done, err := s.read(ctx)
	if err != nil {
		return ledger.Key{}, ledger.Account{}, ledger.Balance{}, err
	}
	defer done()
	var buf [ledger.KeyLen]byte
	if _, ok := ledger.CheckKeyFormatInto(presented, &buf); !ok {
		return ledger.Key{}, ledger.Account{}, ledger.Balance{}, ledger.ErrInvalidKey
	}
	d := sha256.Sum256(buf[:])
	var r keyRow
	var a accountRow
	var b balanceRow
	var current, hasLots bool
	q, dest := pgLookupKeySQL, append(append(r.dest(), &current), a.dest()...)
	if withBalance {
		q, dest = pgLookupKeyBalanceSQL, append(append(dest, b.dest()...), &hasLots)
	}
	err = s.pool.QueryRow(qctx, q, d[:]).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Key{}, ledger.Account{}, ledger.Balance{}, ledger.ErrInvalidKey
	}
	if err != nil {
		return ledger.Key{}, ledger.Account{}, ledger.Balance{}, pgErr(ctx, "looking up key", err)
	}
	k := r.key()
	t := s.now()
	if !current && !t.Before(k.GraceUntil) {
		return ledger.Key{}, ledger.Account{}, ledger.Balance{}, ledger.ErrInvalidKey // a replaced secret past its grace period
	}
	if !k.Revoked.IsZero() {
		return ledger.Key{}, ledger.Account{}, ledger.Balance{}, ledger.ErrInvalidKey
	}
	if !k.Expires.IsZero() && !t.Before(k.Expires) {
		return ledger.Key{}, ledger.Account{}, ledger.Balance{}, ledger.ErrKeyExpired
	}
	k = s.used.merge(k)
	acct := a.account()
	if hasLots {
		// An account with credits that expire: what expired by now leaves, and Expiring is read.
		bal, err := s.Balance(ctx, acct.ID)
		return k, acct, bal, err
	}
	return k, acct, b.balance(acct.ID), nil
}

// flushLastUsed writes the noted last-use times (the periodic flush).
func (s *Postgres) flushLastUsed() error {
	if err := s.life.Begin(); err != nil {
		return err
	}
	defer s.life.End()
	return s.writeLastUsed()
}

// writeLastUsed writes the noted last-use times; a time is never moved back, whichever instance
// writes last. Times that could not be written are kept for the next flush.
func (s *Postgres) writeLastUsed() error {
	m := s.used.take()
	if len(m) == 0 {
		return nil
	}
	ids, times := make([]string, 0, len(m)), make([]int64, 0, len(m))
	for id, t := range m {
		ids, times = append(ids, id), append(times, t)
	}
	wctx, cancel := s.bound(context.Background())
	defer cancel()
	_, err := s.pool.Exec(wctx, `UPDATE api_keys k SET last_used = greatest(coalesce(k.last_used, 0), u.t)
		FROM unnest($1::text[], $2::bigint[]) AS u(id, t) WHERE k.id = u.id`, ids, times)
	if err != nil {
		s.used.putBack(m)
		return pgErr(context.Background(), "writing key last-use times", err)
	}
	return nil
}
