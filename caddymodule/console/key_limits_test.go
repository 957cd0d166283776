package console

import (
	"net/http"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// TestConsoleKeyLimits: the account page says each key's limits as the ledger counts them:
// what is left of its budget after a charge, the tools and addresses it may use, its expiry; a
// key without limits says "none".
func TestConsoleKeyLimits(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, eng.open(t))
			acct, err := e.store.CreateAccount(bg, "limits@example.com")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Grant(bg, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 9}); err != nil {
				t.Fatal(err)
			}
			_, plain, err := e.store.CreateKey(bg, acct.ID, ledger.Live, "plain", time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			expires := time.Now().UTC().Add(48 * time.Hour).Truncate(time.Minute)
			_, k, err := e.store.CreateKey(bg, acct.ID, ledger.Live, "limited", time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.UpdateKey(bg, acct.ID, k.ID, ledger.KeySettings{Name: "limited", Expires: expires,
				Limits: ledger.KeyLimits{BudgetTotal: 5, AllowedTools: []string{"summarizer"}, AllowedCIDRs: []string{"10.0.0.0/8"}}}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Hold(bg, ledger.HoldRequest{AccountID: acct.ID, Mode: ledger.Live, RequestID: "r1", KeyID: k.ID}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Settle(bg, acct.ID, "r1"); err != nil {
				t.Fatal(err)
			}

			en := e.enroll("vera@example.com", ledger.OperatorViewer)
			viewer := e.client()
			expectStatus(t, "the viewer logs in", viewer.login("vera@example.com", en.Password, en.RecoveryCodes[0]), http.StatusSeeOther)
			r := viewer.get("/console/accounts/" + acct.ID)
			expectStatus(t, "the account's page", r, http.StatusOK)
			mustContain(t, "the limited key's limits", r.body, "4 of 5 left in all; expires "+expires.Format("2006-01-02 15:04 UTC")+"; tools: summarizer; from: 10.0.0.0/8")
			mustContain(t, "the plain key", r.body, "…"+plain.Last4+"</td>")
			mustContain(t, "a key without limits", r.body, "<td>none</td>")
		})
	}
}
