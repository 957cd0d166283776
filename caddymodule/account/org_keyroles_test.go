package account

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// orgPerson is one login of the organisation the role tests build, with its browser acting in
// the organisation.
type orgPerson struct {
	name string
	role ledger.Role
	acct ledger.Account
	b    *browser
}

// roleOrg is an organisation with two people of every role: its founder and a second owner,
// two admins, two members, each logged in and acting in it.
type roleOrg struct {
	e                      *testEnv
	org                    ledger.Account
	owner, owner2          *orgPerson
	admin, admin2          *orgPerson
	member, member2, spare *orgPerson
}

func newRoleOrg(t *testing.T, e *testEnv) *roleOrg {
	t.Helper()
	o := &roleOrg{e: e}
	founder := e.browser()
	o.org = founder.signup(uniqueEmail("founder"))
	expectStatus(t, "make an organisation", founder.post("/account/org/create", "csrf_token", founder.csrf("/account/org")), http.StatusSeeOther)
	o.owner = &orgPerson{name: "owner", role: ledger.RoleOwner, acct: o.org, b: founder}
	join := func(name string, role ledger.Role) *orgPerson {
		b := e.browser()
		a := b.signup(uniqueEmail(name))
		if _, err := e.store.AddMember(bg, o.org.ID, a.ID, role, false); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, name+" switching in", b.post("/account/org/switch", "csrf_token", b.csrf("/account/org"), "org", o.org.ID), http.StatusSeeOther)
		return &orgPerson{name: name, role: role, acct: a, b: b}
	}
	o.owner2 = join("owner2", ledger.RoleOwner)
	o.admin, o.admin2 = join("admin", ledger.RoleAdmin), join("admin2", ledger.RoleAdmin)
	o.member, o.member2, o.spare = join("member", ledger.RoleMember), join("member2", ledger.RoleMember), join("spare", ledger.RoleMember)
	return o
}

// keyOf makes a fresh live key of the organisation for p, returning its secret and record.
func (o *roleOrg) keyOf(t *testing.T, p *orgPerson, name string) (string, ledger.Key) {
	t.Helper()
	full, k, err := o.e.store.CreateMemberKey(bg, o.org.ID, p.acct.ID, ledger.Live, name, time.Time{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if ledger.KeyMember(k) != p.acct.ID {
		t.Fatalf("the key of %s belongs to %s", p.name, ledger.KeyMember(k))
	}
	return full, k
}

func (o *roleOrg) key(t *testing.T, id string) ledger.Key {
	t.Helper()
	keys, err := o.e.store.ListKeys(bg, o.org.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.ID == id {
			return k
		}
	}
	t.Fatalf("no key %s", id)
	return ledger.Key{}
}

// TestKeyActionsByRole: every key action (see, limits, rename, revoke, roll) by an owner, an
// admin and a member of an organisation, on a key of an owner, of an admin, of a member and of
// their own, each a forged form post with the actor's valid session and CSRF token, on both
// ledger engines. Where the rule refuses, the answer carries no secret and the key is as it
// was: its secret still works and its name and limits are unchanged. The rule: everyone does
// everything to their own keys; owners see, limit, rename and revoke every key, admins those of
// members only; nobody rolls a key that is not theirs.
func TestKeyActionsByRole(t *testing.T) {
	for _, engine := range []struct {
		name string
		open func(t *testing.T) ledger.Store
	}{
		{"badger", func(t *testing.T) ledger.Store {
			s, err := badgerledger.Open(t.TempDir(), badgerledger.Options{DisableSyncWrites: true, SweepInterval: -1, GCInterval: -1, LastUsedFlushInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"postgres", func(t *testing.T) ledger.Store { return postgresOpener(t, pgtest.NewDatabase(t))() }},
	} {
		t.Run(engine.name, func(t *testing.T) {
			e := newTestEnvOn(t, engine.open(t))
			o := newRoleOrg(t, e)
			keyActionsByRole(t, o)
			usageByKeyByRole(t, o)
			memberActionsByRole(t, o)
		})
	}
}

func keyActionsByRole(t *testing.T, o *roleOrg) {
	// The expected outcome, written out rather than asked of ledger.Allowed: 0 allowed, else the
	// status of the refusal (404: a key the actor may not even see).
	const ok = 0
	type row struct{ see, limits, rename, revoke, roll int }
	all := row{ok, ok, ok, ok, ok}
	manage := row{ok, ok, ok, ok, http.StatusForbidden}
	hidden := row{http.StatusNotFound, http.StatusNotFound, http.StatusNotFound, http.StatusNotFound, http.StatusNotFound}
	want := map[ledger.Role]map[string]row{
		ledger.RoleOwner:  {"owner": manage, "admin": manage, "member": manage, "self": all},
		ledger.RoleAdmin:  {"owner": hidden, "admin": hidden, "member": manage, "self": all},
		ledger.RoleMember: {"owner": hidden, "admin": hidden, "member": hidden, "self": all},
	}
	for _, actor := range []*orgPerson{o.owner, o.admin, o.member} {
		holders := map[string]*orgPerson{"owner": o.owner, "admin": o.admin, "member": o.member, "self": actor}
		// Another of the actor's own role: an owner on another owner's key, and so on.
		switch actor {
		case o.owner:
			holders["owner"] = o.owner2
		case o.admin:
			holders["admin"] = o.admin2
		case o.member:
			holders["member"] = o.member2
		}
		for _, kind := range []string{"owner", "admin", "member", "self"} {
			holder, w := holders[kind], want[actor.role][kind]
			for _, c := range []struct {
				action string
				want   int
			}{{"see", w.see}, {"limits", w.limits}, {"rename", w.rename}, {"revoke", w.revoke}, {"roll", w.roll}} {
				what := fmt.Sprintf("%s (%s) %s on the key of %s (%s)", actor.name, actor.role, c.action, holder.name, kind)
				keyAction(t, o, actor, holder, c.action, c.want, what)
			}
		}
	}
}

// keyAction does one action of actor's on a fresh key of holder's and checks its outcome.
func keyAction(t *testing.T, o *roleOrg, actor, holder *orgPerson, action string, refused int, what string) {
	t.Helper()
	full, k := o.keyOf(t, holder, fmt.Sprintf("k-%s-%s-%d", holder.name, action, time.Now().UnixNano()))
	b := actor.b
	tok := b.csrf("/account/keys")
	var r resp
	switch action {
	case "see":
		r = b.get("/account/keys/settings?id=" + k.ID)
		list := b.get("/account/keys").body
		if refused == 0 {
			mustContain(t, what+": the keys page", list, k.Name)
		} else {
			mustNotContain(t, what+": the keys page", list, k.Name, k.ID)
		}
	case "limits":
		r = b.post("/account/keys/settings", "csrf_token", tok, "id", k.ID, "name", k.Name, "budget_month", "7")
	case "rename":
		r = b.post("/account/keys/settings", "csrf_token", tok, "id", k.ID, "name", k.Name+"-renamed")
	case "revoke":
		r = b.post("/account/keys/revoke", "csrf_token", tok, "id", k.ID)
	case "roll":
		r = b.post("/account/keys/roll", "csrf_token", tok, "id", k.ID, "grace", "0")
	}
	after := o.key(t, k.ID)
	if refused != 0 {
		expectStatus(t, what, r, refused)
		if fullKeyRe.MatchString(r.body) {
			t.Fatalf("%s: refused, the answer carries a secret:\n%s", what, r.body)
		}
		if _, _, err := o.e.store.LookupKey(bg, full); err != nil {
			t.Fatalf("%s: refused, the key's secret no longer works: %v", what, err)
		}
		if after.Name != k.Name || after.BudgetMonth != k.BudgetMonth || !after.Revoked.IsZero() || !after.Rolled.IsZero() || after.Last4 != k.Last4 {
			t.Fatalf("%s: refused, the key changed:\nbefore %+v\nafter  %+v", what, k, after)
		}
		return
	}
	switch action {
	case "see":
		expectStatus(t, what, r, http.StatusOK)
		mustContain(t, what, r.body, k.Name)
		if fullKeyRe.MatchString(r.body) {
			t.Fatalf("%s: the settings page carries a secret:\n%s", what, r.body)
		}
	case "limits":
		expectStatus(t, what, r, http.StatusSeeOther)
		if after.BudgetMonth != 7 {
			t.Fatalf("%s: the monthly budget is %d", what, after.BudgetMonth)
		}
	case "rename":
		expectStatus(t, what, r, http.StatusSeeOther)
		if after.Name != k.Name+"-renamed" {
			t.Fatalf("%s: the name is %q", what, after.Name)
		}
	case "revoke":
		expectStatus(t, what, r, http.StatusSeeOther)
		if _, _, err := o.e.store.LookupKey(bg, full); err == nil || after.Revoked.IsZero() {
			t.Fatalf("%s: the key still works (%v)", what, err)
		}
	case "roll":
		expectStatus(t, what, r, http.StatusCreated)
		secret := fullKeyRe.FindString(r.body)
		if secret == "" || secret == full {
			t.Fatalf("%s: no new secret on the page:\n%s", what, r.body)
		}
		if got, _, err := o.e.store.LookupKey(bg, secret); err != nil || got.ID != k.ID {
			t.Fatalf("%s: the new secret: %v", what, err)
		}
	}
}

// usageByKeyByRole: the use per key (the dashboard's table and usage-by-key.csv) lists the keys
// the session may see: an admin's leaves out an owner's and another admin's keys.
func usageByKeyByRole(t *testing.T, o *roleOrg) {
	mustGrant(t, o.e.store, ledger.GrantRequest{AccountID: o.org.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 10})
	// A key shows by its id in the CSV and by its last 4 on the dashboard.
	ids := map[string]map[string]string{"/account/usage-by-key.csv": {}, "/account/": {}}
	for i, p := range []*orgPerson{o.owner, o.admin2, o.member} {
		_, k := o.keyOf(t, p, "used-by-"+p.name)
		ids["/account/usage-by-key.csv"][p.name], ids["/account/"][p.name] = k.ID, "<code>…"+k.Last4+"</code>"
		rid := fmt.Sprintf("use-%d", i)
		if _, err := o.e.store.Hold(bg, ledger.HoldRequest{AccountID: o.org.ID, Mode: ledger.Live, RequestID: rid, KeyID: k.ID, Tool: "summarizer"}); err != nil {
			t.Fatal(err)
		}
		if _, err := o.e.store.Settle(bg, o.org.ID, rid); err != nil {
			t.Fatal(err)
		}
	}
	for path, ids := range ids {
		r := o.admin.b.get(path)
		expectStatus(t, "the admin's "+path, r, http.StatusOK)
		mustContain(t, "the admin's "+path, r.body, "used-by-member", ids["member"])
		mustNotContain(t, "the admin's "+path, r.body, "used-by-owner", "used-by-admin2", ids["owner"], ids["admin2"])
		r = o.owner.b.get(path)
		mustContain(t, "the owner's "+path, r.body, "used-by-member", "used-by-owner", "used-by-admin2", ids["owner"], ids["admin2"])
	}
}

// memberActionsByRole: the members page's actions one member takes on another (removal, role,
// cap, invitation), forged with a valid CSRF token. An admin acts on members only, never on an
// owner or another admin; a member on nobody; an owner on everyone.
func memberActionsByRole(t *testing.T, o *roleOrg) {
	member := func(p *orgPerson) ledger.Membership {
		t.Helper()
		m, err := o.e.store.GetMembership(bg, o.org.ID, p.acct.ID)
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		return m
	}
	// An admin's page offers to remove members only.
	page := o.admin.b.get("/account/org").body
	mustContain(t, "the admin's members page", page, `id="remove-`+o.spare.acct.ID+`"`)
	mustNotContain(t, "the admin's members page", page, `id="remove-`+o.admin2.acct.ID+`"`, `id="remove-`+o.owner2.acct.ID+`"`,
		`<option value="admin">`, `<option value="owner">`)
	mustContain(t, "the owner's members page", o.owner.b.get("/account/org").body, `id="remove-`+o.admin2.acct.ID+`"`, `<option value="admin">`)

	for _, c := range []struct {
		actor  *orgPerson
		path   string
		fields []string
		status int
	}{
		{o.admin, "/account/org/remove", []string{"member", o.admin2.acct.ID}, http.StatusForbidden},
		{o.admin, "/account/org/remove", []string{"member", o.owner2.acct.ID}, http.StatusForbidden},
		{o.admin, "/account/org/role", []string{"member", o.member.acct.ID, "role", "admin"}, http.StatusForbidden},
		{o.admin, "/account/org/role", []string{"member", o.admin.acct.ID, "role", "owner"}, http.StatusForbidden},
		{o.admin, "/account/org/cap", []string{"member", o.admin2.acct.ID, "cap", "1"}, http.StatusForbidden},
		{o.admin, "/account/org/invite", []string{"email", uniqueEmail("new-admin"), "role", "admin"}, http.StatusForbidden},
		{o.admin, "/account/org/invite", []string{"email", uniqueEmail("new-owner"), "role", "owner"}, http.StatusForbidden},
		{o.member, "/account/org/remove", []string{"member", o.member2.acct.ID}, http.StatusForbidden},
		{o.member, "/account/org/cap", []string{"member", o.member.acct.ID, "cap", "0"}, http.StatusForbidden},
		{o.member, "/account/org/invite", []string{"email", uniqueEmail("friend"), "role", "member"}, http.StatusForbidden},
	} {
		before := map[string]ledger.Membership{}
		for _, p := range []*orgPerson{o.owner2, o.admin, o.admin2, o.member, o.member2} {
			before[p.name] = member(p)
		}
		full, _ := o.keyOf(t, o.admin2, fmt.Sprintf("admin2-%d", time.Now().UnixNano()))
		what := fmt.Sprintf("%s (%s) POST %s %v", c.actor.name, c.actor.role, c.path, c.fields)
		r := c.actor.b.post(c.path, append([]string{"csrf_token", c.actor.b.csrf("/account/keys")}, c.fields...)...)
		expectStatus(t, what, r, c.status)
		for _, p := range []*orgPerson{o.owner2, o.admin, o.admin2, o.member, o.member2} {
			if m := member(p); m.Role != before[p.name].Role || m.MonthlyCap != before[p.name].MonthlyCap {
				t.Fatalf("%s: refused, %s's membership changed: %+v", what, p.name, m)
			}
		}
		if _, _, err := o.e.store.LookupKey(bg, full); err != nil {
			t.Fatalf("%s: refused, the other admin's key no longer works: %v", what, err)
		}
	}
	ms, _ := o.e.store.ListMembers(bg, o.org.ID)
	if len(ms) != 7 {
		t.Fatalf("refused invitations added members: %+v", ms)
	}

	// What the roles do allow: an admin invites a member and removes one; an owner removes an
	// admin.
	tok := o.admin.b.csrf("/account/org")
	expectStatus(t, "an admin inviting a member", o.admin.b.post("/account/org/invite", "csrf_token", tok, "email", uniqueEmail("new-member"), "role", "member"), http.StatusSeeOther)
	spareKey, _ := o.keyOf(t, o.spare, "spare")
	expectStatus(t, "an admin removing a member", o.admin.b.post("/account/org/remove", "csrf_token", tok, "member", o.spare.acct.ID), http.StatusSeeOther)
	if _, _, err := o.e.store.LookupKey(bg, spareKey); err == nil {
		t.Fatal("the removed member's key still works")
	}
	expectStatus(t, "an owner removing an admin", o.owner.b.post("/account/org/remove", "csrf_token", o.owner.b.csrf("/account/org"), "member", o.admin2.acct.ID), http.StatusSeeOther)
	if _, err := o.e.store.GetMembership(bg, o.org.ID, o.admin2.acct.ID); err == nil {
		t.Fatal("the admin the owner removed is still a member")
	}
}
