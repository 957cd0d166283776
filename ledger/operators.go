package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"time"
)

// Operators are the people who run the service from the operator's web console: each logs in
// with a password (argon2id, password.go) and a second factor (a TOTP code, whose secret the
// console seals before the ledger sees it, or a single-use recovery code, stored only as its
// SHA-256 digest), in a session of their own. Everything an operator does that changes money
// or access is written to the audit log first, which nothing can change or delete.
type Operators interface {
	// CreateOperator stores a new operator: its password hashed, its sealed TOTP secret as
	// given, its recovery codes as digests.
	//
	// Expected errors:
	//   - ErrInvalidArgument: a bad email or role, no sealed secret or one over 1 KiB, no
	//     recovery code, more than 20, or one empty or over 64 bytes.
	//   - ErrWeakPassword: the password fails CheckPasswordPolicy.
	//   - ErrDuplicateEmail: an operator has this email.
	//   - ErrClosed.
	CreateOperator(ctx context.Context, n NewOperator) (Operator, error)

	// ListOperators returns every operator, by email.
	//
	// Expected errors: ErrClosed.
	ListOperators(ctx context.Context) ([]Operator, error)

	// RemoveOperator deletes the operator and ends its sessions. The audit log keeps what it did.
	//
	// Expected errors: ErrNotFound, ErrClosed.
	RemoveOperator(ctx context.Context, id string) error

	// AuthenticateOperator returns the operator whose email and password match, with its sealed
	// TOTP secret. An unknown email and a wrong password cost the same argon2id work and give
	// the same error.
	//
	// Expected errors: ErrInvalidCredentials, ErrClosed.
	AuthenticateOperator(ctx context.Context, email, password string) (Operator, []byte, error)

	// UseTOTPStep records that the operator's TOTP code of time step step was used. A step at
	// or before the last one used is refused, so a code cannot be replayed, on any instance.
	//
	// Expected errors: ErrCodeUsed, ErrNotFound, ErrClosed.
	UseTOTPStep(ctx context.Context, operatorID string, step int64) error

	// UseRecoveryCode uses up one of the operator's recovery codes (case, spaces and dashes
	// ignored). Each code works once.
	//
	// Expected errors: ErrInvalidCredentials (no such code left), ErrNotFound, ErrClosed.
	UseRecoveryCode(ctx context.Context, operatorID, code string) error

	// CreateOperatorSession starts a console session of ttl (at most MaxSessionTTL) and returns
	// its token, once. The session carries its own CSRF token.
	//
	// Expected errors: ErrInvalidArgument (ttl), ErrNotFound, ErrClosed.
	CreateOperatorSession(ctx context.Context, operatorID string, ttl time.Duration) (string, OperatorSession, error)

	// GetOperatorSession returns the live session of token and its operator, and records the
	// visit (LastSeen). A session ends at its expiry, or when idle > 0 and it was not used for
	// idle; an ended session is deleted.
	//
	// Expected errors: ErrInvalidSession, ErrClosed.
	GetOperatorSession(ctx context.Context, token string, idle time.Duration) (OperatorSession, Operator, error)

	// DeleteOperatorSession ends the session of token (log-out); an unknown token is not an
	// error.
	//
	// Expected errors: ErrClosed.
	DeleteOperatorSession(ctx context.Context, token string) error

	// AppendAudit adds rec to the audit log, with a new ID and the time now, and returns it.
	// There is no call that changes or removes a record.
	//
	// Expected errors: ErrInvalidArgument (no operator, action or note; a field too long or not
	// UTF-8), ErrClosed.
	AppendAudit(ctx context.Context, rec AuditRecord) (AuditRecord, error)

	// ListAudit lists the audit log newest first, q.Limit at a time (0: 50, at most 1000), of
	// one account when q.AccountID is set. nextCursor is "" on the last page.
	//
	// Expected errors: ErrInvalidArgument (a cursor this store did not make, a negative
	// limit), ErrClosed; ctx's error.
	ListAudit(ctx context.Context, q AuditQuery) (records []AuditRecord, nextCursor string, err error)
}

// OperatorRole is what an operator may do in the console.
type OperatorRole string

const (
	// OperatorViewer reads everything and changes nothing.
	OperatorViewer OperatorRole = "viewer"
	// OperatorSupport also writes notes, and grants and adjusts credits within the console's limit.
	OperatorSupport OperatorRole = "support"
	// OperatorOwner may do everything: also disable and enable accounts, and refund.
	OperatorOwner OperatorRole = "owner"
)

// Operator is an operator as the ledger shows it (no hash, no secret).
type Operator struct {
	ID                string       `json:"id"`
	Email             string       `json:"email"`
	Role              OperatorRole `json:"role"`
	Created           time.Time    `json:"created"`
	RecoveryCodesLeft int          `json:"recovery_codes_left"`
}

// NewOperator is what CreateOperator stores.
type NewOperator struct {
	Email         string
	Role          OperatorRole
	Password      string
	TOTPSealed    []byte   // the TOTP secret, sealed by the caller
	RecoveryCodes []string // in clear here; only their digests are stored
}

// OperatorSession is a console session; its token is not in it.
type OperatorSession struct {
	ID         string
	OperatorID string
	Created    time.Time
	Expires    time.Time
	LastSeen   time.Time
	CSRFToken  string
}

// AuditRecord is one entry of the audit log: who did what, to which account, and why.
type AuditRecord struct {
	ID            string    `json:"id"`
	Time          time.Time `json:"time"`
	OperatorID    string    `json:"operator_id"`
	OperatorEmail string    `json:"operator_email"`
	Action        string    `json:"action"`
	AccountID     string    `json:"account_id,omitempty"`
	Detail        string    `json:"detail,omitempty"`
	Note          string    `json:"note"`
}

// AuditQuery selects a page of the audit log.
type AuditQuery struct {
	AccountID string
	Page
}

// Limits of the operators' records.
const (
	maxTOTPSealed     = 1024
	maxRecoveryCodes  = 20
	maxRecoveryLen    = 64
	maxAuditAction    = 64
	maxAuditDetail    = 1024
	maxAuditNote      = 1024
	operatorIDLen     = len("op_") + 12
	auditIDLen        = len("aud_") + 16
	maxOperatorIDLen  = 64
	maxAuditAccountID = 64
)

func NewOperatorID() string { return "op_" + RandomBase62(12) }
func NewAuditID() string    { return "aud_" + RandomBase62(16) }

// checkOperatorRole refuses a role that is not one of the three.
func checkOperatorRole(r OperatorRole) error {
	switch r {
	case OperatorViewer, OperatorSupport, OperatorOwner:
		return nil
	}
	return fmt.Errorf("role %q is not viewer, support or owner: %w", r, ErrInvalidArgument)
}

// CheckNewOperator checks n and returns its normalised email and the digests of its codes.
func CheckNewOperator(n NewOperator) (string, [][32]byte, error) {
	e, err := NormalizeEmail(n.Email)
	if err != nil {
		return "", nil, err
	}
	if err := checkOperatorRole(n.Role); err != nil {
		return "", nil, err
	}
	if len(n.TOTPSealed) == 0 || len(n.TOTPSealed) > maxTOTPSealed {
		return "", nil, fmt.Errorf("the sealed TOTP secret must be 1 to %d bytes: %w", maxTOTPSealed, ErrInvalidArgument)
	}
	if len(n.RecoveryCodes) == 0 || len(n.RecoveryCodes) > maxRecoveryCodes {
		return "", nil, fmt.Errorf("an operator has 1 to %d recovery codes: %w", maxRecoveryCodes, ErrInvalidArgument)
	}
	ds := make([][32]byte, 0, len(n.RecoveryCodes))
	for _, c := range n.RecoveryCodes {
		c = NormalizeRecoveryCode(c)
		if c == "" || len(c) > maxRecoveryLen {
			return "", nil, fmt.Errorf("a recovery code is 1 to %d characters: %w", maxRecoveryLen, ErrInvalidArgument)
		}
		ds = append(ds, sha256.Sum256([]byte(c)))
	}
	if err := CheckPasswordPolicy(e, n.Password); err != nil {
		return "", nil, err
	}
	return e, ds, nil
}

// NormalizeRecoveryCode is the form of a recovery code that is hashed: upper case, without
// spaces and dashes, so that "abcd-efgh" and "ABCDEFGH" are one code.
func NormalizeRecoveryCode(c string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == ' ' || r == '\t' {
			return -1
		}
		return r
	}, strings.ToUpper(strings.TrimSpace(c)))
}

// RecoveryDigest is the stored form of a recovery code as typed.
func RecoveryDigest(code string) [32]byte { return sha256.Sum256([]byte(NormalizeRecoveryCode(code))) }

// CheckAudit checks a record to append.
func CheckAudit(rec AuditRecord) error {
	for _, f := range []struct {
		name, v  string
		max      int
		required bool
	}{
		{"operator id", rec.OperatorID, maxOperatorIDLen, true},
		{"operator email", rec.OperatorEmail, maxEmailLen, true},
		{"action", rec.Action, maxAuditAction, true},
		{"account id", rec.AccountID, maxAuditAccountID, false},
		{"detail", rec.Detail, maxAuditDetail, false},
		{"note", strings.TrimSpace(rec.Note), maxAuditNote, true},
	} {
		if err := CheckString(f.name, f.v, f.max, f.required); err != nil {
			return err
		}
	}
	return nil
}

// AuditCursor is the cursor of the ListAudit page that ended with the record at t with id.
func AuditCursor(t time.Time, id string) string {
	b := binary.BigEndian.AppendUint64([]byte("u:"), uint64(t.UnixNano()))
	return base64.RawURLEncoding.EncodeToString(append(b, id...))
}

// AuditPage is the preamble of ListAudit: the page size and the (time, id) before which the
// page starts (zero time: from the newest).
func AuditPage(q AuditQuery) (limit int, beforeNano int64, beforeID string, err error) {
	if limit, err = pageLimit(q.Page); err != nil {
		return 0, 0, "", err
	}
	if err := CheckString("account id", q.AccountID, maxAuditAccountID, false); err != nil {
		return 0, 0, "", err
	}
	if q.Cursor == "" {
		return limit, 0, "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(q.Cursor)
	if err != nil || len(b) != 2+8+auditIDLen || string(b[:2]) != "u:" {
		return 0, 0, "", fmt.Errorf("cursor %q: %w", q.Cursor, ErrInvalidArgument)
	}
	return limit, int64(binary.BigEndian.Uint64(b[2:10])), string(b[10:]), nil
}
