package badgerledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// The console's operators, their sessions and the audit log in the Badger engine. Operators are
// few: one record each (prefixOperator), found by email with a scan. s.opMu, held until a write
// is durable, makes each read-then-write one step (a TOTP step used, a recovery code used up, a
// session seen or ended). Audit records are keyed by time and id, so the log reads newest
// first with a reverse iteration, and no call writes an existing key again.

// operatorRecord is the stored form of an operator.
type operatorRecord struct {
	ID         string              `json:"id"`
	Email      string              `json:"email"`
	Role       ledger.OperatorRole `json:"role"`
	Created    time.Time           `json:"created"`
	Hash       string              `json:"hash"`
	TOTPSealed []byte              `json:"totp_sealed"`
	LastStep   int64               `json:"last_step"`
	Recovery   []string            `json:"recovery"` // hex SHA-256 digests of the codes not used yet
}

func (r operatorRecord) operator() ledger.Operator {
	return ledger.Operator{ID: r.ID, Email: r.Email, Role: r.Role, Created: r.Created, RecoveryCodesLeft: len(r.Recovery)}
}

// opSessionRecord is the stored form of a console session; the token is not in it.
type opSessionRecord struct {
	OperatorID string    `json:"operator_id"`
	Created    time.Time `json:"created"`
	Expires    time.Time `json:"expires"`
	LastSeen   time.Time `json:"last_seen"`
	CSRFToken  string    `json:"csrf_token"`
}

func (r opSessionRecord) session(d [32]byte) ledger.OperatorSession {
	return ledger.OperatorSession{ID: ledger.SessionID(d), OperatorID: r.OperatorID, Created: r.Created, Expires: r.Expires,
		LastSeen: r.LastSeen, CSRFToken: r.CSRFToken}
}

func operatorKey(id string) []byte   { return key1(prefixOperator, id) }
func opSessionKey(d [32]byte) []byte { return append([]byte{prefixOperatorSess}, d[:]...) }
func auditKey(t time.Time, id string) []byte {
	k := binary.BigEndian.AppendUint64([]byte{prefixAudit}, uint64(t.UnixNano()))
	return append(k, id...)
}

// CreateOperator stores a new operator, its email unique among operators.
func (s *Badger) CreateOperator(ctx context.Context, n ledger.NewOperator) (ledger.Operator, error) {
	e, ds, err := ledger.CheckNewOperator(n)
	if err != nil {
		return ledger.Operator{}, err
	}
	hash, err := ledger.HashPassword(n.Password)
	if err != nil {
		return ledger.Operator{}, err
	}
	if err := s.beginWrite(); err != nil {
		return ledger.Operator{}, err
	}
	defer s.life.End()
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if _, ok, err := s.operatorByEmail(ctx, e); err != nil {
		return ledger.Operator{}, err
	} else if ok {
		return ledger.Operator{}, fmt.Errorf("operator %q: %w", e, ledger.ErrDuplicateEmail)
	}
	rec := operatorRecord{ID: ledger.NewOperatorID(), Email: e, Role: n.Role, Created: s.now().UTC(), Hash: hash,
		TOTPSealed: bytes.Clone(n.TOTPSealed)}
	for _, d := range ds {
		rec.Recovery = append(rec.Recovery, hex.EncodeToString(d[:]))
	}
	if err := s.c.enqueue([]write{set(operatorKey(rec.ID), mustJSON(rec))}).wait(); err != nil {
		return ledger.Operator{}, err
	}
	return rec.operator(), nil
}

// operators reads every operator record.
func (s *Badger) operators(ctx context.Context) ([]operatorRecord, error) {
	var out []operatorRecord
	err := scanJSON(ctx, s, prefixOperator, "operator", func(r operatorRecord) bool {
		out = append(out, r)
		return false
	})
	return out, err
}

func (s *Badger) operatorByEmail(ctx context.Context, email string) (operatorRecord, bool, error) {
	ops, err := s.operators(ctx)
	if err != nil {
		return operatorRecord{}, false, err
	}
	for _, o := range ops {
		if o.Email == email {
			return o, true, nil
		}
	}
	return operatorRecord{}, false, nil
}

// operator reads one operator record; ok is false when there is none.
func (s *Badger) operator(id string) (operatorRecord, bool, error) {
	if err := s.begin(); err != nil {
		return operatorRecord{}, false, err
	}
	defer s.life.End()
	v, ok, err := s.get(operatorKey(id))
	if err != nil || !ok {
		return operatorRecord{}, false, err
	}
	r, err := readJSON[operatorRecord](v, fmt.Sprintf("operator %q", id))
	return r, err == nil, err
}

// ListOperators returns every operator, by email.
func (s *Badger) ListOperators(ctx context.Context) ([]ledger.Operator, error) {
	ops, err := s.operators(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ledger.Operator, 0, len(ops))
	for _, o := range ops {
		out = append(out, o.operator())
	}
	slices.SortFunc(out, func(a, b ledger.Operator) int { return strings.Compare(a.Email, b.Email) })
	return out, nil
}

// RemoveOperator deletes the operator and its sessions.
func (s *Badger) RemoveOperator(ctx context.Context, id string) error {
	if err := s.beginChange(); err != nil {
		return err
	}
	defer s.life.End()
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if _, ok, err := s.operator(id); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("operator %q: %w", id, ledger.ErrNotFound)
	}
	ws := []write{del(operatorKey(id))}
	err := s.db.View(func(txn *badger.Txn) error {
		return iterate(txn, []byte{prefixOperatorSess}, func(k, v []byte) error {
			if r, err := readJSON[opSessionRecord](v, "console session"); err == nil && r.OperatorID == id {
				ws = append(ws, del(k))
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	return s.c.enqueue(ws).wait()
}

// AuthenticateOperator checks an operator's email and password.
func (s *Badger) AuthenticateOperator(ctx context.Context, email, password string) (ledger.Operator, []byte, error) {
	if len(password) > ledger.MaxPasswordLen {
		return ledger.Operator{}, nil, ledger.ErrInvalidCredentials
	}
	o, ok, err := s.operatorByEmail(ctx, ledger.FoldEmail(email))
	if err != nil {
		return ledger.Operator{}, nil, err
	}
	if !ok {
		_, _ = ledger.VerifyPassword(ledger.DummyHash(), password)
		return ledger.Operator{}, nil, ledger.ErrInvalidCredentials
	}
	match, err := ledger.VerifyPassword(o.Hash, password)
	if err != nil {
		return ledger.Operator{}, nil, fmt.Errorf("operator %q: %w", o.ID, err)
	}
	if !match {
		return ledger.Operator{}, nil, ledger.ErrInvalidCredentials
	}
	return o.operator(), o.TOTPSealed, nil
}

// updateOperator applies change to the operator's record under s.opMu and writes it when change
// returns nil.
func (s *Badger) updateOperator(id string, change func(*operatorRecord) error) error {
	if err := s.beginChange(); err != nil {
		return err
	}
	defer s.life.End()
	s.opMu.Lock()
	defer s.opMu.Unlock()
	o, ok, err := s.operator(id)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("operator %q: %w", id, ledger.ErrNotFound)
	}
	if err := change(&o); err != nil {
		return err
	}
	return s.c.enqueue([]write{set(operatorKey(id), mustJSON(o))}).wait()
}

// UseTOTPStep records the operator's used time step, refusing one at or before the last.
func (s *Badger) UseTOTPStep(ctx context.Context, operatorID string, step int64) error {
	return s.updateOperator(operatorID, func(o *operatorRecord) error {
		if step <= o.LastStep {
			return ledger.ErrCodeUsed
		}
		o.LastStep = step
		return nil
	})
}

// UseRecoveryCode uses up one recovery code.
func (s *Badger) UseRecoveryCode(ctx context.Context, operatorID, code string) error {
	d := ledger.RecoveryDigest(code)
	h := hex.EncodeToString(d[:])
	return s.updateOperator(operatorID, func(o *operatorRecord) error {
		i := slices.Index(o.Recovery, h)
		if i < 0 || ledger.NormalizeRecoveryCode(code) == "" {
			return ledger.ErrInvalidCredentials
		}
		o.Recovery = slices.Delete(o.Recovery, i, i+1)
		return nil
	})
}

// CreateOperatorSession starts a console session.
func (s *Badger) CreateOperatorSession(ctx context.Context, operatorID string, ttl time.Duration) (string, ledger.OperatorSession, error) {
	if err := ledger.CheckSessionTTL(ttl); err != nil {
		return "", ledger.OperatorSession{}, err
	}
	if err := s.beginWrite(); err != nil {
		return "", ledger.OperatorSession{}, err
	}
	defer s.life.End()
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if _, ok, err := s.operator(operatorID); err != nil {
		return "", ledger.OperatorSession{}, err
	} else if !ok {
		return "", ledger.OperatorSession{}, fmt.Errorf("operator %q: %w", operatorID, ledger.ErrNotFound)
	}
	token := ledger.RandomBase62(ledger.SessionTokenLen)
	d := sha256.Sum256([]byte(token))
	t := s.now().UTC()
	rec := opSessionRecord{OperatorID: operatorID, Created: t, Expires: t.Add(ttl), LastSeen: t, CSRFToken: ledger.RandomBase62(ledger.CsrfTokenLen)}
	w := set(opSessionKey(d), mustJSON(rec))
	w.expiresAt = uint64(time.Now().Add(ttl).Unix()) + 1 // GetOperatorSession also compares with the clock
	if err := s.c.enqueue([]write{w}).wait(); err != nil {
		return "", ledger.OperatorSession{}, err
	}
	return token, rec.session(d), nil
}

// GetOperatorSession finds a live console session by its token and records the visit.
func (s *Badger) GetOperatorSession(ctx context.Context, token string, idle time.Duration) (ledger.OperatorSession, ledger.Operator, error) {
	if !ledger.LooksLikeToken(token) {
		return ledger.OperatorSession{}, ledger.Operator{}, ledger.ErrInvalidSession
	}
	if err := s.beginChange(); err != nil {
		return ledger.OperatorSession{}, ledger.Operator{}, err
	}
	defer s.life.End()
	s.opMu.Lock()
	defer s.opMu.Unlock()
	d := sha256.Sum256([]byte(token))
	v, ok, err := s.get(opSessionKey(d))
	if err != nil {
		return ledger.OperatorSession{}, ledger.Operator{}, err
	}
	if !ok {
		return ledger.OperatorSession{}, ledger.Operator{}, ledger.ErrInvalidSession
	}
	rec, err := readJSON[opSessionRecord](v, "console session "+ledger.SessionID(d))
	if err != nil {
		return ledger.OperatorSession{}, ledger.Operator{}, err
	}
	t := s.now().UTC()
	o, found, err := s.operator(rec.OperatorID)
	if err != nil {
		return ledger.OperatorSession{}, ledger.Operator{}, err
	}
	if !found || !t.Before(rec.Expires) || (idle > 0 && t.Sub(rec.LastSeen) >= idle) {
		if err := s.c.enqueue([]write{del(opSessionKey(d))}).wait(); err != nil {
			return ledger.OperatorSession{}, ledger.Operator{}, err
		}
		return ledger.OperatorSession{}, ledger.Operator{}, ledger.ErrInvalidSession
	}
	rec.LastSeen = t
	w := set(opSessionKey(d), mustJSON(rec))
	w.expiresAt = uint64(time.Now().Add(rec.Expires.Sub(t)).Unix()) + 1
	if err := s.c.enqueue([]write{w}).wait(); err != nil {
		return ledger.OperatorSession{}, ledger.Operator{}, err
	}
	return rec.session(d), o.operator(), nil
}

// DeleteOperatorSession ends the console session of token, if there is one.
func (s *Badger) DeleteOperatorSession(ctx context.Context, token string) error {
	if !ledger.LooksLikeToken(token) {
		return nil
	}
	if err := s.beginChange(); err != nil {
		return err
	}
	defer s.life.End()
	s.opMu.Lock()
	defer s.opMu.Unlock()
	d := sha256.Sum256([]byte(token))
	return s.c.enqueue([]write{del(opSessionKey(d))}).wait()
}

// AppendAudit adds a record to the audit log under a key no other record has.
func (s *Badger) AppendAudit(ctx context.Context, rec ledger.AuditRecord) (ledger.AuditRecord, error) {
	if err := ledger.CheckAudit(rec); err != nil {
		return ledger.AuditRecord{}, err
	}
	// Recording what an operator does protects the accounts: it goes on within the reserve.
	if err := s.beginChange(); err != nil {
		return ledger.AuditRecord{}, err
	}
	defer s.life.End()
	rec.ID, rec.Time, rec.Note = ledger.NewAuditID(), s.now().UTC(), strings.TrimSpace(rec.Note)
	if err := s.c.enqueue([]write{set(auditKey(rec.Time, rec.ID), mustJSON(rec))}).wait(); err != nil {
		return ledger.AuditRecord{}, err
	}
	return rec, nil
}

// ListAudit reads the audit log newest first.
func (s *Badger) ListAudit(ctx context.Context, q ledger.AuditQuery) ([]ledger.AuditRecord, string, error) {
	limit, beforeNano, beforeID, err := ledger.AuditPage(q)
	if err != nil {
		return nil, "", err
	}
	if err := s.begin(); err != nil {
		return nil, "", err
	}
	defer s.life.End()
	out := []ledger.AuditRecord{}
	more := false
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixAudit}, Reverse: true, PrefetchValues: true})
		defer it.Close()
		seek := []byte{prefixAudit + 1}
		if beforeID != "" {
			// Just before the cursor's key: the cursor's record itself was on the last page.
			seek = auditKey(time.Unix(0, beforeNano), beforeID)
		}
		for it.Seek(seek); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			if beforeID != "" && bytes.Equal(it.Item().Key(), seek) {
				continue
			}
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			r, err := readJSON[ledger.AuditRecord](v, "audit record")
			if err != nil {
				return err
			}
			if q.AccountID != "" && r.AccountID != q.AccountID {
				continue
			}
			if len(out) == limit {
				more = true
				return nil
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if more {
		last := out[len(out)-1]
		next = ledger.AuditCursor(last.Time, last.ID)
	}
	return out, next, nil
}
