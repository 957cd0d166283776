package console

import (
	"net/http"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// TestConsoleRefundChecks, on Badger and PostgreSQL: a refund names a purchase of the account
// whose page sent it (a form forged with another account's purchase is refused before anything
// is audited), its amount is read exactly in cents, and without My Account's Stripe on the
// ledger it is refused, nothing refunded, with the failure in the audit log.
func TestConsoleRefundChecks(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, eng.open(t))
			at := time.Date(2026, 5, 1, 9, 0, 10, 0, time.UTC)
			setClock(t, &at)
			var accts []ledger.Account
			for _, email := range []string{"a@example.com", "b@example.com"} {
				a, err := e.store.CreateAccount(bg, email)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := e.store.Grant(bg, ledger.GrantRequest{AccountID: a.ID, Mode: ledger.Live, Kind: ledger.KindPurchase,
					Credits: 10, Reference: "cs_" + email[:1], AmountCents: 200, Currency: "EUR"}); err != nil {
					t.Fatal(err)
				}
				accts = append(accts, a)
			}
			en := e.enroll("olga@example.com", ledger.OperatorOwner)
			c := e.client()
			expectStatus(t, "log-in", c.login("olga@example.com", en.Password, en.RecoveryCodes[0]), http.StatusSeeOther)
			page := "/console/accounts/" + accts[0].ID
			csrf := c.csrf(page)
			r := c.post(page+"/refund", "csrf_token", csrf, "reference", "cs_b", "note", "wrong account")
			expectStatus(t, "a refund of another account's purchase", r, http.StatusBadRequest)
			for _, bad := range []string{"1.234", "-1", "abc", "1.2.3", "2000000"} {
				r = c.post(page+"/refund", "csrf_token", csrf, "reference", "cs_a", "amount", bad, "note", "bad amount")
				expectStatus(t, "a refund of "+bad+" EUR", r, http.StatusBadRequest)
			}
			r = c.post(page+"/refund", "csrf_token", csrf, "reference", "cs_a", "reason", "because", "note", "bad reason")
			expectStatus(t, "a refund with an unknown reason", r, http.StatusBadRequest)
			if recs, _, _ := e.store.ListAudit(bg, ledger.AuditQuery{}); len(recs) != 0 {
				t.Fatalf("refused refunds were audited: %+v", recs)
			}
			r = c.post(page+"/refund", "csrf_token", csrf, "reference", "cs_a", "amount", "1,5", "note", "no Stripe here")
			expectStatus(t, "a refund without Stripe", r, http.StatusConflict)
			mustContain(t, "a refund without Stripe", r.body, "no textgen_account with Stripe")
			recs, _, err := e.store.ListAudit(bg, ledger.AuditQuery{})
			if err != nil || len(recs) != 2 || recs[1].Action != "refund" || recs[1].Detail != "refund of cs_a, 1.50 EUR" || recs[0].Action != "refund.failed" {
				t.Fatalf("audit of the refund without Stripe: %+v %v", recs, err)
			}
			for _, a := range accts {
				if b, _ := e.store.Balance(bg, a.ID); b.Balance != 10 {
					t.Fatalf("balance of %s after refused refunds: %d", a.Email, b.Balance)
				}
			}
		})
	}
}

// TestParseEUR: an amount in EUR is read exactly, in cents, with a point or a comma; anything
// else is refused.
func TestParseEUR(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "2": 200, "2.5": 250, "2,50": 250, "0.01": 1, " 10.00 ": 1000, ".5": 50, "1000000": 100_000_000} {
		if got, err := parseEUR(in); err != nil || got != want {
			t.Errorf("parseEUR(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"1.234", "-1", "abc", "1.2.3", "1000001", ".", "1e3", "0x10", "1. 5", "-0.5", "+1", "-0"} {
		if got, err := parseEUR(in); err == nil {
			t.Errorf("parseEUR(%q) = %d, want an error", in, got)
		}
	}
}
