package ledgertest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// The Operators role: the console's operators, their second factor, sessions and the audit
// log. Run for every engine by the conformance suite.

// opCodes are the recovery codes MustOperator enrols.
var opCodes = []string{"AAAA-BBBB-CCCC", "DDDD-EEEE-FFFF", "GGGG-HHHH-JJJJ"}

// OpCodes returns the recovery codes MustOperator enrols an operator with.
func OpCodes() []string { return append([]string(nil), opCodes...) }

// OpSealedSecret is the TOTP secret, as the console would seal it, that MustOperator enrols.
const OpSealedSecret = "sealed-by-the-console:JBSWY3DPEHPK3PXP"

func newOp(email string, role ledger.OperatorRole) ledger.NewOperator {
	return ledger.NewOperator{Email: email, Role: role, Password: GoodPassword, TOTPSealed: []byte(OpSealedSecret),
		RecoveryCodes: append([]string(nil), opCodes...)}
}

// MustOperator enrols an operator with GoodPassword, OpSealedSecret and OpCodes.
func MustOperator(t *testing.T, s ledger.Operators, email string, role ledger.OperatorRole) ledger.Operator {
	t.Helper()
	o, err := s.CreateOperator(bg, newOp(email, role))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// testOperators: an operator is created with its role and codes, found by email and password
// (not by a wrong one), listed by email, unique by email, and removed with its sessions; the
// password and the recovery codes are never stored in clear.
func testOperators(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	eng.setNow(t, &clock)
	if ops, err := s.ListOperators(bg); err != nil || len(ops) != 0 {
		t.Fatalf("operators of a new store: %v, %v", ops, err)
	}
	bob := MustOperator(t, s, " Bob@Example.com", ledger.OperatorSupport)
	ann := MustOperator(t, s, "ann@example.com", ledger.OperatorOwner)
	if bob.Email != "bob@example.com" || bob.Role != ledger.OperatorSupport || !bob.Created.Equal(clock) || bob.RecoveryCodesLeft != 3 || bob.ID == "" {
		t.Fatalf("created %+v", bob)
	}
	if _, err := s.CreateOperator(bg, newOp("BOB@example.com", ledger.OperatorViewer)); !errors.Is(err, ledger.ErrDuplicateEmail) {
		t.Fatalf("a second operator with bob's email: %v", err)
	}
	ops, err := s.ListOperators(bg)
	if err != nil || len(ops) != 2 || ops[0] != ann || ops[1] != bob {
		t.Fatalf("list: %+v, %v", ops, err)
	}
	got, sealed, err := s.AuthenticateOperator(bg, "BOB@example.com", GoodPassword)
	if err != nil || got != bob || string(sealed) != OpSealedSecret {
		t.Fatalf("authenticate: %+v %q %v", got, sealed, err)
	}
	for _, c := range [][2]string{{"bob@example.com", GoodPassword + "x"}, {"nobody@example.com", GoodPassword}, {"bob@example.com", ""}} {
		if _, _, err := s.AuthenticateOperator(bg, c[0], c[1]); !errors.Is(err, ledger.ErrInvalidCredentials) {
			t.Fatalf("authenticate %q: %v", c[0], err)
		}
	}
	assertNotStored(t, eng, s, GoodPassword, "AAAA-BBBB-CCCC", "AAAABBBBCCCC")

	token, _, err := s.CreateOperatorSession(bg, bob.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveOperator(bg, bob.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveOperator(bg, bob.ID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("removing twice: %v", err)
	}
	if _, _, err := s.GetOperatorSession(bg, token, 0); !errors.Is(err, ledger.ErrInvalidSession) {
		t.Fatalf("the session of a removed operator: %v", err)
	}
	if _, _, err := s.AuthenticateOperator(bg, "bob@example.com", GoodPassword); !errors.Is(err, ledger.ErrInvalidCredentials) {
		t.Fatalf("a removed operator logs in: %v", err)
	}
	if ops, err := s.ListOperators(bg); err != nil || len(ops) != 1 || ops[0] != ann {
		t.Fatalf("after removal: %+v, %v", ops, err)
	}
	if _, _, err := s.CreateOperatorSession(bg, bob.ID, time.Hour); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a session for a removed operator: %v", err)
	}
}

// testOperatorSecondFactor: a TOTP step is used once, and never one before the last; of many
// uses of one step at once exactly one wins; a recovery code works once, whatever its case and
// dashes, and a wrong one never.
func testOperatorSecondFactor(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	op := MustOperator(t, s, "ann@example.com", ledger.OperatorOwner)
	if err := s.UseTOTPStep(bg, op.ID, 1000); err != nil {
		t.Fatal(err)
	}
	for _, step := range []int64{1000, 999, 1} {
		if err := s.UseTOTPStep(bg, op.ID, step); !errors.Is(err, ledger.ErrCodeUsed) {
			t.Fatalf("step %d after 1000: %v", step, err)
		}
	}
	if err := s.UseTOTPStep(bg, "op_nobodynobody", 5); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("an unknown operator: %v", err)
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			switch err := s.UseTOTPStep(bg, op.ID, 1001); {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, ledger.ErrCodeUsed):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("one step used %d times at once", wins.Load())
	}

	if err := s.UseRecoveryCode(bg, op.ID, "WRONG-CODE-0000"); !errors.Is(err, ledger.ErrInvalidCredentials) {
		t.Fatalf("a wrong recovery code: %v", err)
	}
	if err := s.UseRecoveryCode(bg, op.ID, ""); !errors.Is(err, ledger.ErrInvalidCredentials) {
		t.Fatalf("an empty recovery code: %v", err)
	}
	if err := s.UseRecoveryCode(bg, op.ID, " aaaa bbbb-cccc "); err != nil {
		t.Fatalf("a recovery code typed loosely: %v", err)
	}
	if err := s.UseRecoveryCode(bg, op.ID, "AAAA-BBBB-CCCC"); !errors.Is(err, ledger.ErrInvalidCredentials) {
		t.Fatalf("a recovery code used twice: %v", err)
	}
	wins.Store(0)
	for range 8 {
		wg.Go(func() {
			switch err := s.UseRecoveryCode(bg, op.ID, "DDDD-EEEE-FFFF"); {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, ledger.ErrInvalidCredentials):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("one recovery code used %d times at once", wins.Load())
	}
	ops, err := s.ListOperators(bg)
	if err != nil || ops[0].RecoveryCodesLeft != 1 {
		t.Fatalf("codes left: %+v, %v", ops, err)
	}
}

// testOperatorSessions: a console session carries a CSRF token, records each visit, ends at
// its expiry, after idle time without a visit, and at log-out.
func testOperatorSessions(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	eng.setNow(t, &clock)
	op := MustOperator(t, s, "ann@example.com", ledger.OperatorViewer)
	if _, _, err := s.CreateOperatorSession(bg, op.ID, 0); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("a session without a lifetime: %v", err)
	}
	token, sess, err := s.CreateOperatorSession(bg, op.ID, 8*time.Hour)
	if err != nil || sess.OperatorID != op.ID || sess.CSRFToken == "" || !sess.Expires.Equal(clock.Add(8*time.Hour)) {
		t.Fatalf("create: %+v, %v", sess, err)
	}
	assertNotStored(t, eng, s, token)
	idle := 30 * time.Minute
	for range 3 { // visits 20 minutes apart keep it alive past the idle time
		clock = clock.Add(20 * time.Minute)
		got, gotOp, err := s.GetOperatorSession(bg, token, idle)
		if err != nil || got.CSRFToken != sess.CSRFToken || !got.LastSeen.Equal(clock) || gotOp != op {
			t.Fatalf("visit at %s: %+v %+v %v", clock, got, gotOp, err)
		}
	}
	clock = clock.Add(idle)
	if _, _, err := s.GetOperatorSession(bg, token, idle); !errors.Is(err, ledger.ErrInvalidSession) {
		t.Fatalf("after %s idle: %v", idle, err)
	}
	if _, _, err := s.GetOperatorSession(bg, token, 0); !errors.Is(err, ledger.ErrInvalidSession) {
		t.Fatalf("an idle-ended session came back: %v", err)
	}
	token2, _, err := s.CreateOperatorSession(bg, op.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Hour)
	if _, _, err := s.GetOperatorSession(bg, token2, 0); !errors.Is(err, ledger.ErrInvalidSession) {
		t.Fatalf("an expired session: %v", err)
	}
	token3, _, err := s.CreateOperatorSession(bg, op.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteOperatorSession(bg, token3); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetOperatorSession(bg, token3, 0); !errors.Is(err, ledger.ErrInvalidSession) {
		t.Fatalf("a session after log-out: %v", err)
	}
	for _, bad := range []string{"", "short", token3 + "x"} {
		if _, _, err := s.GetOperatorSession(bg, bad, 0); !errors.Is(err, ledger.ErrInvalidSession) {
			t.Fatalf("token %q: %v", bad, err)
		}
		if err := s.DeleteOperatorSession(bg, bad); err != nil {
			t.Fatalf("ending token %q: %v", bad, err)
		}
	}
}

// testAudit: records are appended with an id and the time, listed newest first (of one account
// or all), page by page, and a note is required.
func testAudit(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	eng.setNow(t, &clock)
	if recs, next, err := s.ListAudit(bg, ledger.AuditQuery{}); err != nil || len(recs) != 0 || next != "" {
		t.Fatalf("audit of a new store: %v %q %v", recs, next, err)
	}
	var want []ledger.AuditRecord
	for i := range 7 {
		if i%3 != 2 {
			clock = clock.Add(time.Second) // two records share a time: the id orders them
		}
		acct := "acct_aaaaaaaaaaaaaaaa"
		if i%2 == 1 {
			acct = "acct_bbbbbbbbbbbbbbbb"
		}
		r, err := s.AppendAudit(bg, ledger.AuditRecord{OperatorID: "op_1", OperatorEmail: "ann@example.com", Action: "grant",
			AccountID: acct, Detail: fmt.Sprintf("+%d credits", i), Note: fmt.Sprintf("  note %d ", i)})
		if err != nil {
			t.Fatal(err)
		}
		if r.ID == "" || !r.Time.Equal(clock) || r.Note != fmt.Sprintf("note %d", i) {
			t.Fatalf("appended %+v", r)
		}
		want = append([]ledger.AuditRecord{r}, want...)
	}
	// Newest first: by time, then by id (descending) among records of one time.
	wantOrder := func(recs []ledger.AuditRecord) []ledger.AuditRecord {
		out := append([]ledger.AuditRecord(nil), recs...)
		for i := 1; i < len(out); i++ {
			for j := i; j > 0 && (out[j].Time.After(out[j-1].Time) || out[j].Time.Equal(out[j-1].Time) && out[j].ID > out[j-1].ID); j-- {
				out[j], out[j-1] = out[j-1], out[j]
			}
		}
		return out
	}
	want = wantOrder(want)
	var got []ledger.AuditRecord
	cursor := ""
	for pages := 0; ; pages++ {
		recs, next, err := s.ListAudit(bg, ledger.AuditQuery{Page: ledger.Page{Cursor: cursor, Limit: 3}})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, recs...)
		if next == "" {
			if pages != 2 {
				t.Fatalf("%d pages of 3 for 7 records", pages+1)
			}
			break
		}
		cursor = next
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("audit log\n got %+v\nwant %+v", got, want)
	}
	recs, _, err := s.ListAudit(bg, ledger.AuditQuery{AccountID: "acct_bbbbbbbbbbbbbbbb"})
	if err != nil || len(recs) != 3 {
		t.Fatalf("one account's records: %+v, %v", recs, err)
	}
	for i, r := range recs {
		if r.AccountID != "acct_bbbbbbbbbbbbbbbb" || (i > 0 && r.Time.After(recs[i-1].Time)) {
			t.Fatalf("one account's records: %+v", recs)
		}
	}
	for _, bad := range []ledger.AuditRecord{
		{OperatorID: "op_1", OperatorEmail: "ann@example.com", Action: "grant", Note: "   "},
		{OperatorID: "op_1", OperatorEmail: "ann@example.com", Note: "why"},
		{OperatorEmail: "ann@example.com", Action: "grant", Note: "why"},
		{OperatorID: "op_1", OperatorEmail: "ann@example.com", Action: "grant", Note: "bad \xff"},
	} {
		if _, err := s.AppendAudit(bg, bad); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Fatalf("append %+v: %v", bad, err)
		}
	}
	if _, _, err := s.ListAudit(bg, ledger.AuditQuery{Page: ledger.Page{Cursor: "garbage"}}); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("a bad cursor: %v", err)
	}
	if recs, _, _ := s.ListAudit(bg, ledger.AuditQuery{}); len(recs) != 7 {
		t.Fatalf("refused records were appended: %d", len(recs))
	}
}

// testOperatorsInvalid: what CreateOperator refuses, with nothing stored.
func testOperatorsInvalid(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	for name, n := range map[string]ledger.NewOperator{
		"email":       {Email: "not an address", Role: ledger.OperatorOwner, Password: GoodPassword, TOTPSealed: []byte("x"), RecoveryCodes: opCodes},
		"role":        {Email: "a@example.com", Role: "admin", Password: GoodPassword, TOTPSealed: []byte("x"), RecoveryCodes: opCodes},
		"secret":      {Email: "a@example.com", Role: ledger.OperatorOwner, Password: GoodPassword, RecoveryCodes: opCodes},
		"codes":       {Email: "a@example.com", Role: ledger.OperatorOwner, Password: GoodPassword, TOTPSealed: []byte("x")},
		"empty code":  {Email: "a@example.com", Role: ledger.OperatorOwner, Password: GoodPassword, TOTPSealed: []byte("x"), RecoveryCodes: []string{" - "}},
		"big secret":  {Email: "a@example.com", Role: ledger.OperatorOwner, Password: GoodPassword, TOTPSealed: make([]byte, 1025), RecoveryCodes: opCodes},
		"many codes":  {Email: "a@example.com", Role: ledger.OperatorOwner, Password: GoodPassword, TOTPSealed: []byte("x"), RecoveryCodes: make([]string, 21)},
		"weak":        {Email: "a@example.com", Role: ledger.OperatorOwner, Password: "short", TOTPSealed: []byte("x"), RecoveryCodes: opCodes},
		"no password": {Email: "a@example.com", Role: ledger.OperatorOwner, TOTPSealed: []byte("x"), RecoveryCodes: opCodes},
	} {
		want := ledger.ErrInvalidArgument
		if name == "weak" || name == "no password" {
			want = ledger.ErrWeakPassword
		}
		if _, err := s.CreateOperator(bg, n); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	if ops, err := s.ListOperators(bg); err != nil || len(ops) != 0 {
		t.Fatalf("stored after refusals: %+v, %v", ops, err)
	}
}
