package console

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
)

// TestConsoleCodes, on Badger and PostgreSQL: an owner makes a code, which the answer shows once
// and no later page shows; support cannot make one (even with a forged form) but disables one;
// a viewer sees the list and who redeemed it; every change is in the audit log first.
func TestConsoleCodes(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, eng.open(t))
			logIn := func(email string, role ledger.OperatorRole) *client {
				en := e.enroll(email, role)
				c := e.client()
				expectStatus(t, email+" logs in", c.login(email, en.Password, en.RecoveryCodes[0]), http.StatusSeeOther)
				return c
			}
			owner := logIn("olga@example.com", ledger.OperatorOwner)
			csrf := owner.csrf("/console/codes")
			expectStatus(t, "a code without a note", owner.post("/console/codes", "csrf_token", csrf, "credits", "5"), http.StatusBadRequest)
			expectStatus(t, "a code of 0 credits", owner.post("/console/codes", "csrf_token", csrf, "credits", "0", "note", "x"), http.StatusBadRequest)
			expectStatus(t, "a code that expired", owner.post("/console/codes", "csrf_token", csrf, "credits", "5", "note", "x",
				"expires", "2001-01-01"), http.StatusBadRequest)
			r := owner.post("/console/codes", "csrf_token", csrf, "credits", "25", "uses", "3", "note", "newsletter")
			expectStatus(t, "the owner makes a code", r, http.StatusOK)
			code := regexp.MustCompile(`TG-[0-9A-Z]{5}-[0-9A-Z]{5}-[0-9A-Z]{5}-[0-9A-Z]{5}`).FindString(r.body)
			if code == "" {
				t.Fatalf("the answer does not show the code: %s", r.body)
			}
			cs, err := e.store.ListCodes(bg, 0)
			if err != nil || len(cs) != 1 || cs[0].Credits != 25 || cs[0].MaxUses != 3 || cs[0].Note != "newsletter" {
				t.Fatalf("codes after the form: %+v %v", cs, err)
			}
			id := cs[0].ID
			acct, _ := e.store.CreateAccount(bg, "redeemer@example.com")
			if _, err := e.store.Redeem(bg, acct.ID, code); err != nil {
				t.Fatal(err)
			}

			sup := logIn("sam@example.com", ledger.OperatorSupport)
			r = sup.get("/console/codes")
			expectStatus(t, "support's codes page", r, http.StatusOK)
			mustContain(t, "support's codes page", r.body, id, "newsletter", "1 of 3", "active")
			if strings.Contains(r.body, code) || strings.Contains(r.body, `action="/console/codes"`) {
				t.Fatal("the codes page shows the code, or support a form to make one")
			}
			scsrf := sup.csrf("/console/codes")
			expectStatus(t, "support's forged code", sup.post("/console/codes", "csrf_token", scsrf, "credits", "5", "note", "x"), http.StatusForbidden)
			expectStatus(t, "a disable without a note", sup.post("/console/codes/"+id+"/disable", "csrf_token", scsrf), http.StatusBadRequest)
			expectStatus(t, "support disables", sup.post("/console/codes/"+id+"/disable", "csrf_token", scsrf, "note", "posted online"), http.StatusSeeOther)
			expectStatus(t, "an unknown code", sup.post("/console/codes/code_000000000000/disable", "csrf_token", scsrf, "note", "x"), http.StatusNotFound)

			viewer := logIn("vera@example.com", ledger.OperatorViewer)
			r = viewer.get("/console/codes/" + id)
			expectStatus(t, "the code's page", r, http.StatusOK)
			mustContain(t, "the code's page", r.body, acct.ID, "redeemer@example.com", "disabled")
			expectStatus(t, "the viewer's forged disable", viewer.post("/console/codes/"+id+"/disable", "csrf_token",
				viewer.csrf("/console/codes"), "note", "x"), http.StatusForbidden)

			recs, _, err := e.store.ListAudit(bg, ledger.AuditQuery{})
			if err != nil {
				t.Fatal(err)
			}
			var actions []string
			for _, rec := range recs {
				actions = append(actions, rec.Action+" "+rec.OperatorEmail)
			}
			want := []string{"code.disable sam@example.com", "code.created olga@example.com", "code.create olga@example.com"}
			if strings.Join(actions, ",") != strings.Join(want, ",") {
				t.Fatalf("audit: %v, want %v", actions, want)
			}
		})
	}
}
