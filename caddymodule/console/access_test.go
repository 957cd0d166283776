package console

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// TestConsoleLogin, on Badger and PostgreSQL: a log-in needs the password and the TOTP code of
// now; a wrong code is refused, and so is the right code a second time (the ledger keeps the
// step used); a recovery code works once; the session cookie is new at every log-in and the
// token the browser came with is ended (no fixation); failed log-ins are throttled; every page
// refuses to be framed.
func TestConsoleLogin(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, eng.open(t))
			at := time.Date(2026, 5, 1, 9, 0, 10, 0, time.UTC)
			setClock(t, &at)
			ann := e.enroll("ann@example.com", ledger.OperatorOwner)

			c := e.client()
			r := c.get("/console/")
			expectStatus(t, "the overview logged out", r, http.StatusSeeOther)
			if loc := r.header.Get("Location"); loc != "/console/login" {
				t.Fatalf("logged out, the overview sends to %q", loc)
			}
			login := c.get("/console/login")
			for _, h := range [][2]string{{"X-Frame-Options", "DENY"}, {"Cache-Control", "no-store"}} {
				if got := login.header.Get(h[0]); got != h[1] {
					t.Fatalf("%s: %q, want %q", h[0], got, h[1])
				}
			}
			if csp := login.header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Fatalf("CSP %q lets the page be framed", csp)
			}

			wrong := code(t, ann, at.Add(-5*time.Minute))
			r = c.login("ann@example.com", ann.Password, wrong)
			expectStatus(t, "a wrong code", r, http.StatusUnauthorized)
			mustContain(t, "a wrong code", r.body, "Wrong e-mail, password or code")
			r = c.login("ann@example.com", "not the password", code(t, ann, at))
			expectStatus(t, "a wrong password", r, http.StatusUnauthorized)
			if c.cookie("textgen_console") != "" {
				t.Fatal("a failed log-in set a session cookie")
			}

			// Session fixation: a token planted in the browser before the log-in (here a real
			// one, of another log-in) is replaced and ended by the log-in.
			planter := e.client()
			expectStatus(t, "the planter's log-in", planter.login("ann@example.com", ann.Password, ann.RecoveryCodes[0]), http.StatusSeeOther)
			planted := planter.cookie("textgen_console")
			u := c.base + "/console/"
			req, _ := http.NewRequest(http.MethodGet, u, nil)
			req.AddCookie(&http.Cookie{Name: "textgen_console", Value: planted})
			c.http.Jar.SetCookies(req.URL, []*http.Cookie{{Name: "textgen_console", Value: planted, Path: "/console"}})

			good := code(t, ann, at)
			r = c.login("ann@example.com", ann.Password, good)
			expectStatus(t, "the right code", r, http.StatusSeeOther)
			token := c.cookie("textgen_console")
			if token == "" || token == planted {
				t.Fatalf("the session cookie after log-in is %q (planted %q)", token, planted)
			}
			if _, _, err := e.store.GetOperatorSession(bg, planted, 0); err == nil {
				t.Fatal("the planted session lives on after the log-in")
			}
			r = c.get("/console/")
			expectStatus(t, "the overview", r, http.StatusOK)
			mustContain(t, "the overview", r.body, "ann@example.com", "owner", "Generations per day")
			if r.header.Get("X-Frame-Options") != "DENY" {
				t.Fatal("the overview may be framed")
			}

			// The same code again, from another browser: refused, the step is used.
			r = e.client().login("ann@example.com", ann.Password, good)
			expectStatus(t, "a replayed code", r, http.StatusUnauthorized)
			mustContain(t, "a replayed code", r.body, "used already")
			// The code of the next step works.
			at = at.Add(30 * time.Second)
			expectStatus(t, "the next code", e.client().login("ann@example.com", ann.Password, code(t, ann, at)), http.StatusSeeOther)

			// A recovery code works once.
			expectStatus(t, "a used recovery code", e.client().login("ann@example.com", ann.Password, ann.RecoveryCodes[0]), http.StatusUnauthorized)
			expectStatus(t, "a new recovery code", e.client().login("ann@example.com", ann.Password, strings.ToLower(ann.RecoveryCodes[1])), http.StatusSeeOther)

			// Log-out ends the session on the server.
			expectStatus(t, "log-out", c.post("/console/logout", "csrf_token", c.csrf("/console/")), http.StatusSeeOther)
			if _, _, err := e.store.GetOperatorSession(bg, token, 0); err == nil {
				t.Fatal("the session lives on after log-out")
			}

			// Five wrong codes for one e-mail from one address, then even the right one waits.
			th := e.client()
			for i := range 5 {
				expectStatus(t, "a wrong code", th.login("ann@example.com", ann.Password, "00000"+string(rune('0'+i))), http.StatusUnauthorized)
			}
			at = at.Add(30 * time.Second)
			r = th.login("ann@example.com", ann.Password, code(t, ann, at))
			expectStatus(t, "a log-in past the throttle", r, http.StatusTooManyRequests)
		})
	}
}

// TestConsoleRoles, on Badger and PostgreSQL: roles are enforced by the server whatever the
// form says: a viewer's forged grant is refused, a support operator grants within its limit and
// not above it, every action needs a note, forms need the session's CSRF token and the same
// origin; each action is in the audit log with who, what, the account and the note.
func TestConsoleRoles(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, eng.open(t))
			at := time.Date(2026, 5, 1, 9, 0, 10, 0, time.UTC)
			setClock(t, &at)
			acct, err := e.store.CreateAccount(bg, "customer@example.com")
			if err != nil {
				t.Fatal(err)
			}
			logIn := func(email string, role ledger.OperatorRole) *client {
				en := e.enroll(email, role)
				c := e.client()
				expectStatus(t, email+" logs in", c.login(email, en.Password, en.RecoveryCodes[0]), http.StatusSeeOther)
				return c
			}
			balance := func() int64 {
				b, err := e.store.Balance(bg, acct.ID)
				if err != nil {
					t.Fatal(err)
				}
				return b.Balance
			}
			auditLen := func() int {
				recs, _, err := e.store.ListAudit(bg, ledger.AuditQuery{})
				if err != nil {
					t.Fatal(err)
				}
				return len(recs)
			}
			page := "/console/accounts/" + acct.ID

			viewer := logIn("vera@example.com", ledger.OperatorViewer)
			r := viewer.get(page)
			expectStatus(t, "the viewer's account page", r, http.StatusOK)
			if strings.Contains(r.body, "/grant\"") || strings.Contains(r.body, "/refund\"") {
				t.Fatal("the viewer is shown forms it may not use")
			}
			csrf := viewer.csrf(page) // the log-out form's: the session's own token
			for _, act := range []string{"grant", "adjust", "disable", "note", "refund"} {
				r = viewer.post(page+"/"+act, "csrf_token", csrf, "credits", "5", "note", "forged", "reference", "cs_x")
				expectStatus(t, "the viewer's forged "+act, r, http.StatusForbidden)
			}
			if balance() != 0 || auditLen() != 0 {
				t.Fatalf("the viewer's forged forms changed something: balance %d, audit %d", balance(), auditLen())
			}

			sup := logIn("sam@example.com", ledger.OperatorSupport)
			csrf = sup.csrf(page)
			formID := regexp.MustCompile(`name="form_id" value="([^"]+)"`).FindStringSubmatch(sup.get(page).body)
			if formID == nil {
				t.Fatal("no form id in the grant form")
			}
			r = sup.post(page+"/grant", "csrf_token", csrf, "form_id", formID[1], "credits", "100", "note", "goodwill for the outage")
			expectStatus(t, "support grants 100", r, http.StatusSeeOther)
			// The same form sent again (a double click): credited once.
			r = sup.post(page+"/grant", "csrf_token", csrf, "form_id", formID[1], "credits", "100", "note", "goodwill for the outage")
			expectStatus(t, "the same grant form again", r, http.StatusConflict)
			if balance() != 100 {
				t.Fatalf("balance after the grant: %d", balance())
			}
			for _, c := range [][2]string{{"grant", "101"}, {"adjust", "101"}, {"adjust", "-101"}} {
				r = sup.post(page+"/"+c[0], "csrf_token", csrf, "credits", c[1], "note", "too much")
				expectStatus(t, "support "+c[0]+" "+c[1], r, http.StatusForbidden)
				mustContain(t, "support above its limit", r.body, "at most 100 credits")
			}
			r = sup.post(page+"/refund", "csrf_token", csrf, "reference", "cs_x", "note", "not mine to do")
			expectStatus(t, "support refunds", r, http.StatusForbidden)
			r = sup.post(page+"/grant", "csrf_token", csrf, "credits", "5", "note", "  ")
			expectStatus(t, "a grant without a note", r, http.StatusBadRequest)
			r = sup.post(page+"/grant", "csrf_token", "wrong", "credits", "5", "note", "no token")
			expectStatus(t, "a grant with a wrong CSRF token", r, http.StatusForbidden)
			r = sup.post(page+"/grant", "csrf_token", viewer.csrf(page), "credits", "5", "note", "another session's token")
			expectStatus(t, "a grant with another session's CSRF token", r, http.StatusForbidden)
			r = sup.postHdr(page+"/grant", http.Header{"Sec-Fetch-Site": {"cross-site"}}, "csrf_token", csrf, "credits", "5", "note", "cross-site")
			expectStatus(t, "a cross-site grant", r, http.StatusForbidden)
			r = sup.post(page+"/grant", "csrf_token", csrf, "credits", "-3", "note", "a negative grant")
			expectStatus(t, "a negative grant", r, http.StatusBadRequest)
			if balance() != 100 || auditLen() != 2 { // the grant and its repetition: refused input is not an action
				recs, _, _ := e.store.ListAudit(bg, ledger.AuditQuery{})
				t.Fatalf("after refused actions: balance %d, audit %+v", balance(), recs)
			}
			r = sup.post(page+"/disable", "csrf_token", csrf, "note", "abuse report 17")
			expectStatus(t, "support disables", r, http.StatusForbidden)
			r = sup.post("/console/accounts/acct_nobodynobodynobo/note", "csrf_token", csrf, "note", "on nothing")
			expectStatus(t, "a note on no account", r, http.StatusNotFound)

			owner := logIn("olga@example.com", ledger.OperatorOwner)
			csrf = owner.csrf(page)
			r = owner.post(page+"/disable", "csrf_token", csrf, "note", "abuse report 17")
			expectStatus(t, "the owner disables", r, http.StatusSeeOther)
			if a, _ := e.store.GetAccount(bg, acct.ID); a.Status != ledger.StatusDisabled {
				t.Fatalf("status after disable: %s", a.Status)
			}
			r = owner.post(page+"/adjust", "csrf_token", csrf, "credits", "-150", "note", "takes more than there is")
			expectStatus(t, "an adjustment below zero", r, http.StatusConflict)
			r = owner.post(page+"/adjust", "csrf_token", csrf, "credits", "500", "note", "contract credit")
			expectStatus(t, "the owner adjusts 500", r, http.StatusSeeOther)
			if balance() != 600 {
				t.Fatalf("balance after the owner's adjustment: %d", balance())
			}

			recs, _, err := e.store.ListAudit(bg, ledger.AuditQuery{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, rec := range recs {
				got = append(got, rec.OperatorEmail+" "+rec.Action+" "+rec.AccountID+" "+rec.Detail+" | "+rec.Note)
			}
			want := []string{
				"olga@example.com adjust " + acct.ID + " +500 live credits | contract credit",
				"olga@example.com adjust.failed " + acct.ID + " refused: removing 150 live credits would take account " + acct.ID + " below zero (balance 100, available 100) | takes more than there is",
				"olga@example.com adjust " + acct.ID + " -150 live credits | takes more than there is",
				"olga@example.com disable " + acct.ID + "  | abuse report 17",
				"sam@example.com grant " + acct.ID + " +100 live credits | goodwill for the outage",
				"sam@example.com grant " + acct.ID + " +100 live credits | goodwill for the outage",
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("audit log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			r = viewer.get("/console/audit")
			expectStatus(t, "the audit page", r, http.StatusOK)
			mustContain(t, "the audit page", r.body, "goodwill for the outage", "abuse report 17", "sam@example.com", "contract credit")
			// Every cell's tag is whole: nothing stray (such as a "None") written into it.
			for _, td := range regexp.MustCompile(`<td[^>]*>`).FindAllString(r.body, -1) {
				if !regexp.MustCompile(`^<td data-label="[A-Za-z ]+">$`).MatchString(td) {
					t.Fatalf("the audit page has a cell %q", td)
				}
			}
			if strings.Contains(r.body, "None") {
				t.Fatalf("the audit page shows a stray None:\n%s", r.body)
			}
			r = viewer.get(page)
			mustContain(t, "the account page's notes", r.body, "goodwill for the outage", "disabled")
		})
	}
}

// TestConsoleGrantExpires: a grant of the console may carry an expiry in whole days, for live
// credits only; the ledger then says what expires when, and the audit record says it too.
func TestConsoleGrantExpires(t *testing.T) {
	e := newEnv(t, engines[0].open(t))
	acct, err := e.store.CreateAccount(bg, "expiring@example.com")
	if err != nil {
		t.Fatal(err)
	}
	en := e.enroll("owen@example.com", ledger.OperatorOwner)
	c := e.client()
	expectStatus(t, "the owner logs in", c.login("owen@example.com", en.Password, en.RecoveryCodes[0]), http.StatusSeeOther)
	page := "/console/accounts/" + acct.ID
	get := c.get(page)
	mustContain(t, "the account page", get.body, `name="expires_days"`)
	csrf := c.csrf(page)
	for _, bad := range [][]string{{"expires_days", "0"}, {"expires_days", "3651"}, {"expires_days", "soon"}, {"expires_days", "30", "mode", "test"}} {
		r := c.post(page+"/grant", append([]string{"csrf_token", csrf, "credits", "5", "note", "refused"}, bad...)...)
		expectStatus(t, fmt.Sprint("a grant with ", bad), r, http.StatusBadRequest)
	}
	before := time.Now().UTC()
	r := c.post(page+"/grant", "csrf_token", csrf, "credits", "10", "note", "trial month", "expires_days", "30")
	expectStatus(t, "a grant that expires in 30 days", r, http.StatusSeeOther)
	b, err := e.store.Balance(bg, acct.ID)
	if err != nil || b.Balance != 10 || len(b.Expiring) != 1 || b.Expiring[0].Credits != 10 ||
		b.Expiring[0].Expires.Before(before.AddDate(0, 0, 30)) || b.Expiring[0].Expires.After(time.Now().UTC().AddDate(0, 0, 30)) {
		t.Fatalf("balance after the grant: %+v %v", b, err)
	}
	recs, _, err := e.store.ListAudit(bg, ledger.AuditQuery{})
	if err != nil || len(recs) != 1 || !strings.Contains(recs[0].Detail, "expiring") {
		t.Fatalf("audit: %+v %v", recs, err)
	}
}
