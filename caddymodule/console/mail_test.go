package console

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// TestConsoleMailAndPayments, on Badger and PostgreSQL: the outbox lists what waits without its
// content; a viewer cannot drop a message (even with a forged form), support drops one with a
// note, which the audit log keeps; the payments page lists the unmatched payments.
func TestConsoleMailAndPayments(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, eng.open(t))
			at := time.Date(2026, 5, 1, 9, 0, 10, 0, time.UTC)
			setClock(t, &at)
			acct, err := e.store.CreateAccount(bg, "customer@example.com")
			if err != nil {
				t.Fatal(err)
			}
			id, err := e.store.EnqueueMail(bg, ledger.MailMessage{AccountID: acct.ID, Kind: "verify", Sealed: []byte("sealed secret link")})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.store.RecordUnmatchedPayment(bg, ledger.UnmatchedPayment{Reference: "cs_unmatched", AccountID: acct.ID,
				AmountCents: 700, Currency: "eur", Problem: ledger.ProblemAmountMismatch, Detail: "the price is 900"}); err != nil {
				t.Fatal(err)
			}
			// An automatic top-up that was declined.
			if _, err := e.store.SaveTopUpCard(bg, acct.ID, ledger.TopUpCard{CustomerID: "cus_1", PaymentMethodID: "pm_1"}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.SetTopUpRule(bg, acct.ID, ledger.TopUpSettings{Threshold: 5, Package: "starter", MonthlyCap: 2, Enabled: true}); err != nil {
				t.Fatal(err)
			}
			tu, err := e.store.BeginTopUp(bg, acct.ID)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.store.FinishTopUp(bg, tu.ID, ledger.TopUpFailed, "Your card was declined."); err != nil {
				t.Fatal(err)
			}
			logIn := func(email string, role ledger.OperatorRole) *client {
				en := e.enroll(email, role)
				c := e.client()
				expectStatus(t, email+" logs in", c.login(email, en.Password, en.RecoveryCodes[0]), http.StatusSeeOther)
				return c
			}
			viewer := logIn("vera@example.com", ledger.OperatorViewer)
			r := viewer.get("/console/mail")
			expectStatus(t, "the mail page", r, http.StatusOK)
			mustContain(t, "the mail page", r.body, id, "verify", acct.ID)
			if strings.Contains(r.body, "sealed secret link") || strings.Contains(r.body, "/drop\"") {
				t.Fatal("the viewer's mail page shows the sealed content or a drop form")
			}
			r = viewer.post("/console/mail/"+id+"/drop", "csrf_token", viewer.csrf("/console/mail"), "note", "forged")
			expectStatus(t, "the viewer's forged drop", r, http.StatusForbidden)

			sup := logIn("sam@example.com", ledger.OperatorSupport)
			csrf := sup.csrf("/console/mail")
			expectStatus(t, "a drop without a note", sup.post("/console/mail/"+id+"/drop", "csrf_token", csrf), http.StatusBadRequest)
			expectStatus(t, "support drops", sup.post("/console/mail/"+id+"/drop", "csrf_token", csrf, "note", "address bounces"), http.StatusSeeOther)
			if ms, _ := e.store.ListMail(bg, 10); len(ms) != 0 {
				t.Fatalf("the outbox after the drop: %+v", ms)
			}
			expectStatus(t, "dropping it again", sup.post("/console/mail/"+id+"/drop", "csrf_token", csrf, "note", "again"), http.StatusNotFound)
			recs, _, err := e.store.ListAudit(bg, ledger.AuditQuery{})
			if err != nil || len(recs) != 1 || recs[0].Action != "drop" || recs[0].AccountID != acct.ID || recs[0].Note != "address bounces" ||
				recs[0].Detail != "e-mail "+id || recs[0].OperatorEmail != "sam@example.com" {
				t.Fatalf("audit after the drop: %+v %v", recs, err)
			}

			r = viewer.get("/console/payments")
			expectStatus(t, "the payments page", r, http.StatusOK)
			mustContain(t, "the payments page", r.body, "cs_unmatched", "7.00 EUR", "the price is 900", "No refunds.",
				tu.ID, "failed", "Your card was declined.")
		})
	}
}
