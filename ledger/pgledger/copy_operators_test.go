package pgledger

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestCopyLedgerOperators: `ledger migrate` carries the console's operators (they log in with
// the same password, a TOTP step used before stays used, a recovery code used before stays used
// and the others work) and the whole audit log, in its order, which the copy's database then
// refuses to change.
func TestCopyLedgerOperators(t *testing.T) {
	t0 := time.Date(2030, 7, 1, 10, 0, 0, 0, time.UTC)
	setNow(t, &t0)
	from := openBadger(t, t.TempDir())
	ledgertest.MustAccount(t, from, "alice@example.com") // CopyLedger needs the accounts' table filled first
	ann := ledgertest.MustOperator(t, from, "ann@example.com", ledger.OperatorOwner)
	if err := from.UseTOTPStep(bg, ann.ID, 500); err != nil {
		t.Fatal(err)
	}
	if err := from.UseRecoveryCode(bg, ann.ID, ledgertest.OpCodes()[0]); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		t0 = t0.Add(time.Second)
		if _, err := from.AppendAudit(bg, ledger.AuditRecord{OperatorID: ann.ID, OperatorEmail: ann.Email, Action: "note",
			AccountID: "acct_aaaaaaaaaaaaaaaa", Note: fmt.Sprint("note ", i)}); err != nil {
			t.Fatal(err)
		}
	}
	wantAudit, _, err := from.ListAudit(bg, ledger.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}

	to := openPostgres(t, pgtest.NewDatabase(t), pgQuiet)
	if err := CopyLedger(bg, from, to, CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	got, sealed, err := to.AuthenticateOperator(bg, "ann@example.com", ledgertest.GoodPassword)
	if err != nil || got != (ledger.Operator{ID: ann.ID, Email: ann.Email, Role: ledger.OperatorOwner, Created: ann.Created, RecoveryCodesLeft: 2}) ||
		string(sealed) != ledgertest.OpSealedSecret {
		t.Fatalf("the copied operator: %+v %q %v", got, sealed, err)
	}
	if err := to.UseTOTPStep(bg, ann.ID, 500); !errors.Is(err, ledger.ErrCodeUsed) {
		t.Fatalf("a TOTP step used before the copy: %v", err)
	}
	if err := to.UseRecoveryCode(bg, ann.ID, ledgertest.OpCodes()[0]); !errors.Is(err, ledger.ErrInvalidCredentials) {
		t.Fatalf("a recovery code used before the copy: %v", err)
	}
	if err := to.UseRecoveryCode(bg, ann.ID, ledgertest.OpCodes()[1]); err != nil {
		t.Fatalf("a recovery code not used before the copy: %v", err)
	}
	gotAudit, _, err := to.ListAudit(bg, ledger.AuditQuery{})
	if err != nil || fmt.Sprint(gotAudit) != fmt.Sprint(wantAudit) {
		t.Fatalf("the copied audit log\n got %+v\nwant %+v (%v)", gotAudit, wantAudit, err)
	}
	// The audit log is append-only in the database itself, not only in the engine's code.
	for _, sql := range []string{`UPDATE operator_audit SET note = 'changed'`, `DELETE FROM operator_audit`, `TRUNCATE operator_audit`} {
		if _, err := to.pool.Exec(bg, sql); err == nil {
			t.Fatalf("%s: the database allowed it", sql)
		}
	}
	if recs, _, _ := to.ListAudit(bg, ledger.AuditQuery{}); len(recs) != 3 || recs[0].Note != "note 2" {
		t.Fatalf("the audit log after the refused changes: %+v", recs)
	}
}
