package pgledger

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// The console's operators, their sessions and the audit log in the PostgreSQL engine
// (migrations/00012_operators.sql), shared by every instance. A TOTP step is used by
// an update conditional on the last step being older, and a recovery code by one conditional on
// the code's digest being in the array, so of two instances racing with one code one wins. The
// audit log has no UPDATE or DELETE in this engine, and a trigger refuses them in the database.

const pgOperatorCols = "id, email, role, created, cardinality(recovery)"

func scanOperator(row pgx.CollectableRow) (ledger.Operator, error) {
	var o ledger.Operator
	var created int64
	err := row.Scan(&o.ID, &o.Email, &o.Role, &created, &o.RecoveryCodesLeft)
	o.Created = pgTime(created)
	return o, err
}

// CreateOperator stores a new operator, its email unique among operators.
func (s *Postgres) CreateOperator(ctx context.Context, n ledger.NewOperator) (ledger.Operator, error) {
	e, ds, err := ledger.CheckNewOperator(n)
	if err != nil {
		return ledger.Operator{}, err
	}
	hash, err := ledger.HashPassword(n.Password)
	if err != nil {
		return ledger.Operator{}, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.Operator{}, err
	}
	defer done()
	digests := make([][]byte, len(ds))
	for i := range ds {
		digests[i] = ds[i][:]
	}
	rows, _ := s.pool.Query(wctx, `INSERT INTO operators (id, email, role, created, hash, totp_sealed, recovery)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING `+pgOperatorCols,
		ledger.NewOperatorID(), e, string(n.Role), s.now().UTC().UnixNano(), hash, n.TOTPSealed, digests)
	o, err := pgx.CollectExactlyOneRow(rows, scanOperator)
	if pgUniqueConstraint(err) != "" {
		return ledger.Operator{}, fmt.Errorf("operator %q: %w", e, ledger.ErrDuplicateEmail)
	}
	return o, pgErr(ctx, "creating operator", err)
}

// ListOperators returns every operator, by email.
func (s *Postgres) ListOperators(ctx context.Context) ([]ledger.Operator, error) {
	return readList(s, ctx, "listing operators", scanOperator, `SELECT `+pgOperatorCols+` FROM operators ORDER BY email COLLATE "C"`)
}

// RemoveOperator deletes the operator; its sessions go with it (ON DELETE CASCADE).
func (s *Postgres) RemoveOperator(ctx context.Context, id string) error {
	wctx, done, err := s.write(ctx)
	if err != nil {
		return err
	}
	defer done()
	tag, err := s.pool.Exec(wctx, `DELETE FROM operators WHERE id = $1`, id)
	if err != nil {
		return pgErr(ctx, "removing operator", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("operator %q: %w", id, ledger.ErrNotFound)
	}
	return nil
}

// AuthenticateOperator checks an operator's email and password.
func (s *Postgres) AuthenticateOperator(ctx context.Context, email, password string) (ledger.Operator, []byte, error) {
	if len(password) > ledger.MaxPasswordLen {
		return ledger.Operator{}, nil, ledger.ErrInvalidCredentials
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return ledger.Operator{}, nil, err
	}
	defer done()
	var o ledger.Operator
	var created int64
	var hash string
	var sealed []byte
	err = s.pool.QueryRow(qctx, `SELECT `+pgOperatorCols+`, hash, totp_sealed FROM operators WHERE email = $1`,
		ledger.FoldEmail(email)).Scan(&o.ID, &o.Email, &o.Role, &created, &o.RecoveryCodesLeft, &hash, &sealed)
	if errors.Is(err, pgx.ErrNoRows) {
		_, _ = ledger.VerifyPassword(ledger.DummyHash(), password)
		return ledger.Operator{}, nil, ledger.ErrInvalidCredentials
	}
	if err != nil {
		return ledger.Operator{}, nil, pgErr(ctx, "reading operator", err)
	}
	o.Created = pgTime(created)
	match, err := ledger.VerifyPassword(hash, password)
	if err != nil {
		return ledger.Operator{}, nil, fmt.Errorf("operator %q: %w", o.ID, err)
	}
	if !match {
		return ledger.Operator{}, nil, ledger.ErrInvalidCredentials
	}
	return o, sealed, nil
}

// operatorUpdate runs an update of one operator that changes a row only when its condition
// holds; when it changed none, refused is the error if the operator exists.
func (s *Postgres) operatorUpdate(ctx context.Context, id string, refused error, sql string, args ...any) error {
	wctx, done, err := s.write(ctx)
	if err != nil {
		return err
	}
	defer done()
	var exists *bool
	err = s.pool.QueryRow(wctx, `WITH u AS (`+sql+` RETURNING 1)
		SELECT CASE WHEN EXISTS (SELECT 1 FROM u) THEN true
			WHEN EXISTS (SELECT 1 FROM operators WHERE id = $1) THEN false END`, append([]any{id}, args...)...).Scan(&exists)
	switch {
	case err != nil:
		return pgErr(ctx, "updating operator", err)
	case exists == nil:
		return fmt.Errorf("operator %q: %w", id, ledger.ErrNotFound)
	case !*exists:
		return refused
	}
	return nil
}

// UseTOTPStep records the operator's used time step, refusing one at or before the last.
func (s *Postgres) UseTOTPStep(ctx context.Context, operatorID string, step int64) error {
	return s.operatorUpdate(ctx, operatorID, ledger.ErrCodeUsed,
		`UPDATE operators SET totp_last_step = $2 WHERE id = $1 AND totp_last_step < $2`, step)
}

// UseRecoveryCode uses up one recovery code.
func (s *Postgres) UseRecoveryCode(ctx context.Context, operatorID, code string) error {
	if ledger.NormalizeRecoveryCode(code) == "" {
		return ledger.ErrInvalidCredentials
	}
	d := ledger.RecoveryDigest(code)
	return s.operatorUpdate(ctx, operatorID, ledger.ErrInvalidCredentials,
		`UPDATE operators SET recovery = array_remove(recovery, $2::bytea) WHERE id = $1 AND $2::bytea = ANY (recovery)`, d[:])
}

// CreateOperatorSession starts a console session.
func (s *Postgres) CreateOperatorSession(ctx context.Context, operatorID string, ttl time.Duration) (string, ledger.OperatorSession, error) {
	if err := ledger.CheckSessionTTL(ttl); err != nil {
		return "", ledger.OperatorSession{}, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return "", ledger.OperatorSession{}, err
	}
	defer done()
	token := ledger.RandomBase62(ledger.SessionTokenLen)
	d := sha256.Sum256([]byte(token))
	t := s.now().UTC()
	sess := ledger.OperatorSession{ID: ledger.SessionID(d), OperatorID: operatorID, Created: t, Expires: t.Add(ttl), LastSeen: t,
		CSRFToken: ledger.RandomBase62(ledger.CsrfTokenLen)}
	tag, err := s.pool.Exec(wctx, `INSERT INTO operator_sessions (digest, operator_id, created, expires, last_seen, csrf_token)
		SELECT $1, id, $3, $4, $3, $5 FROM operators WHERE id = $2`, d[:], operatorID, t.UnixNano(), sess.Expires.UnixNano(), sess.CSRFToken)
	if err != nil {
		return "", ledger.OperatorSession{}, pgErr(ctx, "creating console session", err)
	}
	if tag.RowsAffected() == 0 {
		return "", ledger.OperatorSession{}, fmt.Errorf("operator %q: %w", operatorID, ledger.ErrNotFound)
	}
	return token, sess, nil
}

// GetOperatorSession finds a live console session by its token and records the visit, in one
// statement; an ended one is deleted.
func (s *Postgres) GetOperatorSession(ctx context.Context, token string, idle time.Duration) (ledger.OperatorSession, ledger.Operator, error) {
	if !ledger.LooksLikeToken(token) {
		return ledger.OperatorSession{}, ledger.Operator{}, ledger.ErrInvalidSession
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.OperatorSession{}, ledger.Operator{}, err
	}
	defer done()
	d := sha256.Sum256([]byte(token))
	t := s.now().UTC().UnixNano()
	idleNS := int64(idle)
	if idle <= 0 {
		idleNS = 1 << 62
	}
	// A live session is seen; an ended one is deleted and nothing is returned.
	_, err = s.pool.Exec(wctx, `DELETE FROM operator_sessions WHERE digest = $1 AND (expires <= $2 OR $2 - last_seen >= $3)`,
		d[:], t, idleNS)
	if err != nil {
		return ledger.OperatorSession{}, ledger.Operator{}, pgErr(ctx, "reading console session", err)
	}
	sess := ledger.OperatorSession{ID: ledger.SessionID(d)}
	var o ledger.Operator
	var created, expires, ocreated int64
	err = s.pool.QueryRow(wctx, `WITH u AS (UPDATE operator_sessions SET last_seen = $2 WHERE digest = $1
			RETURNING operator_id, created, expires, csrf_token)
		SELECT u.created, u.expires, u.csrf_token, o.id, o.email, o.role, o.created, cardinality(o.recovery)
		FROM u JOIN operators o ON o.id = u.operator_id`, d[:], t).
		Scan(&created, &expires, &sess.CSRFToken, &o.ID, &o.Email, &o.Role, &ocreated, &o.RecoveryCodesLeft)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.OperatorSession{}, ledger.Operator{}, ledger.ErrInvalidSession
	}
	if err != nil {
		return ledger.OperatorSession{}, ledger.Operator{}, pgErr(ctx, "reading console session", err)
	}
	sess.OperatorID, sess.Created, sess.Expires, sess.LastSeen = o.ID, pgTime(created), pgTime(expires), pgTime(t)
	o.Created = pgTime(ocreated)
	return sess, o, nil
}

// DeleteOperatorSession ends the console session of token, if there is one.
func (s *Postgres) DeleteOperatorSession(ctx context.Context, token string) error {
	if !ledger.LooksLikeToken(token) {
		return nil
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return err
	}
	defer done()
	d := sha256.Sum256([]byte(token))
	_, err = s.pool.Exec(wctx, `DELETE FROM operator_sessions WHERE digest = $1`, d[:])
	return pgErr(ctx, "ending console session", err)
}

const pgAuditCols = "id, at, operator_id, operator_email, action, account_id, detail, note"

func scanAudit(row pgx.CollectableRow) (ledger.AuditRecord, error) {
	var r ledger.AuditRecord
	var at int64
	err := row.Scan(&r.ID, &at, &r.OperatorID, &r.OperatorEmail, &r.Action, &r.AccountID, &r.Detail, &r.Note)
	r.Time = pgTime(at)
	return r, err
}

// AppendAudit adds a record to the audit log.
func (s *Postgres) AppendAudit(ctx context.Context, rec ledger.AuditRecord) (ledger.AuditRecord, error) {
	if err := ledger.CheckAudit(rec); err != nil {
		return ledger.AuditRecord{}, err
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return ledger.AuditRecord{}, err
	}
	defer done()
	rec.ID, rec.Time, rec.Note = ledger.NewAuditID(), s.now().UTC(), strings.TrimSpace(rec.Note)
	_, err = s.pool.Exec(wctx, `INSERT INTO operator_audit (`+pgAuditCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		rec.ID, rec.Time.UnixNano(), rec.OperatorID, rec.OperatorEmail, rec.Action, rec.AccountID, rec.Detail, rec.Note)
	if err != nil {
		return ledger.AuditRecord{}, pgErr(ctx, "appending to the audit log", err)
	}
	return rec, nil
}

// ListAudit reads the audit log newest first, in Badger's order (time, then id, descending).
func (s *Postgres) ListAudit(ctx context.Context, q ledger.AuditQuery) ([]ledger.AuditRecord, string, error) {
	limit, beforeNano, beforeID, err := ledger.AuditPage(q)
	if err != nil {
		return nil, "", err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, "", err
	}
	defer done()
	rows, _ := s.pool.Query(qctx, `SELECT `+pgAuditCols+` FROM operator_audit
		WHERE ($1 = '' OR account_id = $1) AND ($2 = '' OR (at, id) < ($3, $2 COLLATE "C"))
		ORDER BY at DESC, id DESC LIMIT $4`, q.AccountID, beforeID, beforeNano, limit+1)
	out, err := pgx.CollectRows(rows, scanAudit)
	if err != nil {
		return nil, "", pgErr(ctx, "listing the audit log", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = ledger.AuditCursor(out[limit-1].Time, out[limit-1].ID)
	}
	if out == nil {
		out = []ledger.AuditRecord{}
	}
	return out, next, nil
}
