package account

// Organisations in a real headless Chromium against the real Caddy (in process), a real Badger
// ledger on disk and a real SMTP server (mailpit) whose inbox the test reads: an owner makes
// their account an organisation and invites two people, one without a login (the e-mailed link
// sets their password) and one with a login (the e-mail asks them to accept); the new member
// accepts, switches in, makes a key, and a form post of theirs to an owner action is refused;
// the owner sets a role and a cap; the second invitee accepts and leaves, their key revoked.
// Every page is checked with axe-core; screenshots go to testdata/artifacts/browser-org/.

import (
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/caddy-textgen/textgen/caddymodule/internal/mailtest"
	"github.com/caddy-textgen/textgen/ledger"
)

func TestBrowserOrganisation(t *testing.T) {
	fastMail(t)
	mp := mailtest.New(t)
	ctx := newChromium(t)
	dir, err := os.MkdirTemp(testRoot, "ledger-")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEXTGEN_TEST_MAIL_KEY", base64.StdEncoding.EncodeToString(testMailKey))
	loadCaddyfile(t, fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 5s
	skip_install_trust
}
http://127.0.0.1:%d {
	textgen_account {
		ledger %s
		public_url %s
		site_name "Textgen"
		smtp {
			host %s
			port %d
			security none
			from "Textgen <no-reply@example.com>"
		}
		mail_key {env.TEXTGEN_TEST_MAIL_KEY}
	}
	respond "not found" 404
}
`, caddyAdminPort, caddyHTTPPort, caddyHTTPSPort, caddyHTTPPort, dir, caddyBase, mp.Host(), mp.SMTPPort()))
	store, release := openLedger(t, dir)
	defer release()
	shots := &shooter{t: t, ctx: ctx, dir: artifactsDir(t, "browser-org")}
	do, text := shots.do, shots.text
	do("desktop", chromedp.EmulateViewport(1280, 900))
	login := func(email, password, wait string) {
		t.Helper()
		do("log in "+email, chromedp.Navigate(caddyBase+"/account/login"), chromedp.WaitVisible(chromedp.CSS("#email")),
			chromedp.SendKeys(chromedp.CSS("#email"), email), chromedp.SendKeys(chromedp.CSS("#password"), password),
			chromedp.Click(chromedp.CSS(`main button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS(wait)))
	}
	logout := func() {
		t.Helper()
		do("log out", chromedp.Navigate(caddyBase+"/account/org"), chromedp.WaitVisible(chromedp.CSS(`form[action="/account/logout"] button`)),
			chromedp.Click(chromedp.CSS(`form[action="/account/logout"] button`)), chromedp.WaitVisible(chromedp.CSS("#email")))
	}
	person := func(prefix string) ledger.Account {
		t.Helper()
		a, err := store.CreateAccountWithPassword(bg, uniqueEmail(prefix), testPassword)
		if err != nil {
			t.Fatal(err)
		}
		if a, err = store.SetEmailVerified(bg, a.ID); err != nil {
			t.Fatal(err)
		}
		return a
	}
	// click runs before, submits the form of button sel (if any) and waits for the next page (not the one that had the
	// button: a mark set on it must be gone) to show wait.
	click := func(what, sel, wait string, before ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		do(what+": mark the page", chromedp.Evaluate[chromedp.Void](`window.orgTestOld = true`))
		if sel != "" {
			before = append(before, chromedp.Click(chromedp.CSS(sel)))
		}
		do(what, before...)
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			old, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.orgTestOld === true`))
			if err == nil && !old {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no new page", what)
			}
		}
		do(what+": the next page", chromedp.WaitVisible(chromedp.CSS(wait)))
	}

	// The owner makes their account an organisation; credits stay.
	owner := person("org-owner")
	mustGrant(t, store, ledger.GrantRequest{AccountID: owner.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 10, Reference: "browser-org"})
	login(owner.Email, testPassword, "#live-credits")
	do("organisation page", chromedp.Navigate(caddyBase+"/account/org"), chromedp.WaitVisible(chromedp.CSS(`form[action="/account/org/create"] button`)))
	shots.shot("org-personal")
	click("make an organisation", `form[action="/account/org/create"] button`, "#invite-email")
	if r := text("#my-role"); r != "owner" {
		t.Fatalf("the founder's role: %q", r)
	}
	shots.shot("org-owner")

	// Two invitations: an address without a login, and a login that exists.
	fresh := uniqueEmail("org-fresh")
	known := person("org-known")
	for _, email := range []string{fresh, known.Email} {
		click("invite "+email, `form[action="/account/org/invite"] button`, ".notice", chromedp.SendKeys(chromedp.CSS("#invite-email"), email))
	}
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("tbody tr").length`)); n != 3 {
		t.Fatalf("%d rows in the members table, want the owner and two invitations", n)
	}
	shots.shot("org-invited")
	link := mailLink(t, mp, fresh, "Your account on")
	invitation := mp.WaitFor(t, known.Email, "You are invited", 30*time.Second)
	if !strings.Contains(invitation.Text, caddyBase+"/account/org") || !strings.Contains(invitation.Text, owner.Email) {
		t.Fatalf("the invitation of a login:\n%s", invitation.Text)
	}
	logout()

	// The new member sets a password through the link, accepts and switches in.
	do("invitation link", chromedp.Navigate(caddyBase+link), chromedp.WaitVisible(chromedp.CSS("#password")))
	do("first password", chromedp.SendKeys(chromedp.CSS("#password"), testPassword),
		chromedp.Click(chromedp.CSS(`main button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#live-credits")))
	do("organisation page", chromedp.Navigate(caddyBase+"/account/org"), chromedp.WaitVisible(chromedp.CSS(`form[action="/account/org/accept"] button`)))
	shots.shot("org-invitation")
	click("accept", `form[action="/account/org/accept"] button`, ".notice")
	click("switch", `form[action="/account/org/switch"] button`, "#acting", chromedp.SetValue(chromedp.CSS("#switch-org"), owner.ID))
	if r, a := text("#my-role"), text("#acting"); r != "member" || a != owner.Email {
		t.Fatalf("after switching: role %q in %q", r, a)
	}
	shots.shot("org-member")
	freshAcct, err := store.GetAccountByEmail(bg, fresh)
	if err != nil {
		t.Fatal(err)
	}
	do("keys", chromedp.Navigate(caddyBase+"/account/keys"), chromedp.WaitVisible(chromedp.CSS("#key-name")))
	click("create a key", `main form button[type="submit"]`, "main code", chromedp.SendKeys(chromedp.CSS("#key-name"), "member laptop"))
	keys, _ := store.ListKeys(bg, owner.ID)
	if len(keys) != 1 || keys[0].MemberID != freshAcct.ID {
		t.Fatalf("the organisation's keys: %+v", keys)
	}
	// A form of the member's, made in the page with the page's own CSRF token, posted to owner
	// actions: refused.
	for _, f := range []struct{ path, fields string }{
		{"/account/org/cap", `{member: "` + freshAcct.ID + `", cap: "1000"}`},
		{"/account/org/role", `{member: "` + freshAcct.ID + `", role: "owner"}`},
		{"/account/buy", `{package: "10"}`},
	} {
		do("the organisation page", chromedp.Navigate(caddyBase+"/account/org"), chromedp.WaitVisible(chromedp.CSS("#my-role")))
		js := fmt.Sprintf(`(() => {
			const f = document.createElement("form");
			f.method = "post";
			f.action = %q;
			const fields = Object.assign({csrf_token: document.querySelector("input[name=csrf_token]").value}, %s);
			for (const [k, v] of Object.entries(fields)) {
				const i = document.createElement("input");
				i.type = "hidden"; i.name = k; i.value = v;
				f.appendChild(i);
			}
			document.body.appendChild(f);
			f.submit();
		})()`, f.path, f.fields)
		click("the member's POST to "+f.path, "", "h1", chromedp.Evaluate[chromedp.Void](js))
		if h := text("h1"); h != "Not allowed" {
			t.Fatalf("the member's POST to %s: %q", f.path, h)
		}
	}
	shots.shot("org-member-refused")
	if m, _ := store.GetMembership(bg, owner.ID, freshAcct.ID); m.Role != ledger.RoleMember || m.MonthlyCap != 0 {
		t.Fatalf("the member's posts changed %+v", m)
	}
	logout()

	// The owner makes the member an admin and caps them at 5 credits a month.
	login(owner.Email, testPassword, "#live-credits")
	do("organisation page", chromedp.Navigate(caddyBase+"/account/org"), chromedp.WaitVisible(chromedp.CSS("#role-"+freshAcct.ID)))
	click("role", `#member-`+freshAcct.ID+` form[action="/account/org/role"] button`, ".notice",
		chromedp.SetValue(chromedp.CSS("#role-"+freshAcct.ID), "admin"))
	click("cap", `#member-`+freshAcct.ID+` form[action="/account/org/cap"] button`, ".notice",
		chromedp.SetValue(chromedp.CSS("#cap-"+freshAcct.ID), "5"))
	if m, _ := store.GetMembership(bg, owner.ID, freshAcct.ID); m.Role != ledger.RoleAdmin || m.MonthlyCap != 5 {
		t.Fatalf("after the owner's changes: %+v", m)
	}
	shots.shot("org-owner-members")
	do("dashboard", chromedp.Navigate(caddyBase+"/account/"), chromedp.WaitVisible(chromedp.CSS("#by-member-h")))
	shots.shot("dashboard-by-member")
	logout()

	// The login that existed accepts, makes a key and leaves: the key stops working.
	login(known.Email, testPassword, "#live-credits")
	do("organisation page", chromedp.Navigate(caddyBase+"/account/org"), chromedp.WaitVisible(chromedp.CSS(`form[action="/account/org/accept"] button`)))
	click("accept", `form[action="/account/org/accept"] button`, ".notice")
	full, _, err := store.CreateMemberKey(bg, owner.ID, known.ID, ledger.Live, "known", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	do("organisation page", chromedp.Navigate(caddyBase+"/account/org"), chromedp.WaitVisible(chromedp.CSS("#leave-"+owner.ID+" summary")))
	do("open leave", chromedp.Click(chromedp.CSS("#leave-"+owner.ID+" summary")), chromedp.WaitVisible(chromedp.CSS(`form[action="/account/org/leave"] button`)))
	shots.shot("org-leave")
	click("leave", `form[action="/account/org/leave"] button`, ".notice")
	if msg := text(".notice"); !strings.Contains(msg, "You left") {
		t.Fatalf("after leaving: %q", msg)
	}
	shots.shot("org-left")
	if _, _, err := store.LookupKey(bg, full); err != ledger.ErrInvalidKey {
		t.Fatalf("the key of a member who left: %v", err)
	}
}
