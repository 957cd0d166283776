package account

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// TestOrganisationRoles drives My Account over HTTP as an owner and a member of one
// organisation: making the account an organisation, the invitation and its acceptance,
// switching, keys made by and shown to each, every owner action refused to a member's forged
// form post (with a valid CSRF token: the role is what refuses it), an admin who changes no
// owner nor sees an owner's key, the last owner who stays, and a removed member whose cookie
// no longer acts in the organisation and whose key is revoked.
func TestOrganisationRoles(t *testing.T) {
	e := newTestEnv(t)
	owner := e.browser()
	ownerAcct := owner.signup(uniqueEmail("owner"))
	ownerKey, _, err := e.store.CreateKey(bg, ownerAcct.ID, ledger.Live, "owner-key", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	mustGrant(t, e.store, ledger.GrantRequest{AccountID: ownerAcct.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 10})
	mustContain(t, "a personal account's page", owner.get("/account/org").body, "Make this account an organisation")
	r := owner.post("/account/org/create", "csrf_token", owner.csrf("/account/org"))
	if r.status != http.StatusSeeOther || r.location() != "/account/org?done=created" {
		t.Fatalf("create: %d %s", r.status, r.location())
	}
	if b := e.store; b != nil {
		if bal, _ := b.Balance(bg, ownerAcct.ID); bal.Balance != 10 {
			t.Fatalf("the organisation's credits: %+v", bal)
		}
	}

	member := e.browser()
	memberEmail := uniqueEmail("member")
	memberAcct := member.signup(memberEmail)
	r = owner.post("/account/org/invite", "csrf_token", owner.csrf("/account/org"), "email", memberEmail, "role", "member")
	expectStatus(t, "invite", r, http.StatusSeeOther)
	// Invited, not yet a member: switching in is refused.
	expectStatus(t, "switch before accepting", member.post("/account/org/switch", "csrf_token", member.csrf("/account/org"), "org", ownerAcct.ID), http.StatusForbidden)
	mustContain(t, "the invitation", member.get("/account/org").body, "invites you as member")
	expectStatus(t, "accept", member.post("/account/org/accept", "csrf_token", member.csrf("/account/org"), "org", ownerAcct.ID), http.StatusSeeOther)
	expectStatus(t, "switch", member.post("/account/org/switch", "csrf_token", member.csrf("/account/org"), "org", ownerAcct.ID), http.StatusSeeOther)
	if r := member.get("/account/"); r.status != http.StatusSeeOther || r.location() != "/account/org" {
		t.Fatalf("a member's dashboard: %d %s", r.status, r.location())
	}
	page := member.get("/account/org").body
	mustContain(t, "the member's page", page, `id="my-role">member<`, `id="acting">`+ownerAcct.Email)
	mustNotContain(t, "the member's page", page, "Invite a member", `href="/account/buy"`, `href="/account/">Dashboard`)

	// The member's key is theirs; they see only their own keys.
	r = member.post("/account/keys", "csrf_token", member.csrf("/account/keys"), "name", "member-key", "mode", "live")
	expectStatus(t, "member's key", r, http.StatusCreated)
	keys, _ := e.store.ListKeys(bg, ownerAcct.ID)
	var memberKey ledger.Key
	for _, k := range keys {
		if k.Name == "member-key" {
			memberKey = k
		}
	}
	if memberKey.MemberID != memberAcct.ID {
		t.Fatalf("the member's key in the organisation: %+v", keys)
	}
	page = member.get("/account/keys").body
	mustContain(t, "the member's keys", page, "member-key")
	mustNotContain(t, "the member's keys", page, "owner-key")

	// Forged posts of owner and admin actions, each with the member's valid CSRF token.
	tok := member.csrf("/account/org")
	for _, f := range []struct {
		path   string
		fields []string
	}{
		{"/account/org/cap", []string{"member", memberAcct.ID, "cap", "1000"}},
		{"/account/org/role", []string{"member", memberAcct.ID, "role", "owner"}},
		{"/account/org/remove", []string{"member", ownerAcct.ID}},
		{"/account/org/invite", []string{"email", uniqueEmail("friend"), "role", "owner"}},
		{"/account/buy", []string{"package", "10"}},
		{"/account/test-credits", nil},
		{"/account/alerts", []string{"threshold", "5"}},
	} {
		r := member.post(f.path, append([]string{"csrf_token", tok}, f.fields...)...)
		expectStatus(t, "a member's forged POST "+f.path, r, http.StatusForbidden)
	}
	for _, p := range []string{"/account/buy", "/account/usage.csv", "/account/members.csv"} {
		expectStatus(t, "a member's GET "+p, member.get(p), http.StatusForbidden)
	}
	expectStatus(t, "a member revoking the owner's key", member.post("/account/keys/revoke", "csrf_token", tok, "id", ownerKeyID(t, e, ownerAcct.ID)), http.StatusNotFound)
	if _, _, err := e.store.LookupKey(bg, ownerKey); err != nil {
		t.Fatalf("the owner's key after the member's attempt: %v", err)
	}
	if m, _ := e.store.GetMembership(bg, ownerAcct.ID, memberAcct.ID); m.Role != ledger.RoleMember || m.MonthlyCap != 0 {
		t.Fatalf("the member's forged posts changed %+v", m)
	}

	// The owner sets a cap and makes the member an admin; the admin sees every key but changes
	// no owner and sets no cap.
	otok := owner.csrf("/account/org")
	expectStatus(t, "cap", owner.post("/account/org/cap", "csrf_token", otok, "member", memberAcct.ID, "cap", "3"), http.StatusSeeOther)
	expectStatus(t, "role", owner.post("/account/org/role", "csrf_token", otok, "member", memberAcct.ID, "role", "admin"), http.StatusSeeOther)
	mustContain(t, "the owner's page", owner.get("/account/org").body, memberEmail, ">3<", "Invite a member")
	// An admin sees the keys of members below them, never an owner's (TestKeyActionsByRole).
	page = member.get("/account/keys").body
	mustContain(t, "the admin's keys", page, "member-key")
	mustNotContain(t, "the admin's keys", page, "owner-key")
	expectStatus(t, "an admin removing the owner", member.post("/account/org/remove", "csrf_token", tok, "member", ownerAcct.ID), http.StatusForbidden)
	expectStatus(t, "an admin setting a cap", member.post("/account/org/cap", "csrf_token", tok, "member", memberAcct.ID, "cap", "0"), http.StatusForbidden)
	// The last owner cannot step down.
	r = owner.post("/account/org/role", "csrf_token", otok, "member", ownerAcct.ID, "role", "member")
	expectStatus(t, "the last owner stepping down", r, http.StatusConflict)
	mustContain(t, "the last owner stepping down", r.body, "needs an owner")

	// Usage by member, as CSV.
	if _, err := e.store.Hold(bg, ledger.HoldRequest{AccountID: ownerAcct.ID, Mode: ledger.Live, RequestID: "r1", KeyID: memberKey.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Settle(bg, ownerAcct.ID, "r1"); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "the owner's dashboard", owner.get("/account/").body, "Use this month by member", memberEmail+"</td><td>admin</td><td>1</td><td>3</td>")
	csv := owner.get("/account/members.csv")
	expectStatus(t, "members.csv", csv, http.StatusOK)
	mustContain(t, "members.csv", csv.body, "month,member_id,email,credits\n", ledger.MonthOf(time.Now())+","+memberAcct.ID+","+memberEmail+",1\n")

	// Removed: the member's cookie no longer acts in the organisation, and their key is revoked.
	expectStatus(t, "remove", owner.post("/account/org/remove", "csrf_token", otok, "member", memberAcct.ID), http.StatusSeeOther)
	page = member.get("/account/org").body
	mustNotContain(t, "the removed member's page", page, `id="acting"`)
	mustContain(t, "the removed member's page", page, "This is your personal account")
	r = member.post("/account/keys", "csrf_token", member.csrf("/account/keys"), "name", "after-removal", "mode", "live")
	expectStatus(t, "a key after the removal", r, http.StatusCreated)
	keys, _ = e.store.ListKeys(bg, ownerAcct.ID)
	for _, k := range keys {
		if k.Name == "after-removal" {
			t.Fatalf("a removed member made a key in the organisation: %+v", k)
		}
		if k.ID == memberKey.ID && k.Revoked.IsZero() {
			t.Fatalf("the removed member's key is not revoked: %+v", k)
		}
	}

	// Invited again, the member accepts and leaves on their own; their new key goes with them.
	expectStatus(t, "invite again", owner.post("/account/org/invite", "csrf_token", otok, "email", memberEmail), http.StatusSeeOther)
	tok = member.csrf("/account/org")
	expectStatus(t, "accept", member.post("/account/org/accept", "csrf_token", tok, "org", ownerAcct.ID), http.StatusSeeOther)
	expectStatus(t, "switch", member.post("/account/org/switch", "csrf_token", tok, "org", ownerAcct.ID), http.StatusSeeOther)
	full := createdKey(t, member.post("/account/keys", "csrf_token", member.csrf("/account/keys"), "name", "second", "mode", "live"))
	expectStatus(t, "leave", member.post("/account/org/leave", "csrf_token", tok, "org", ownerAcct.ID), http.StatusSeeOther)
	if _, _, err := e.store.LookupKey(bg, full); err != ledger.ErrInvalidKey {
		t.Fatalf("the key of a member who left: %v", err)
	}
	r = owner.post("/account/org/leave", "csrf_token", otok, "org", ownerAcct.ID)
	expectStatus(t, "the founder leaving", r, http.StatusBadRequest)

	// Logging out forgets the organisation chosen.
	expectStatus(t, "invite a third time", owner.post("/account/org/invite", "csrf_token", otok, "email", memberEmail), http.StatusSeeOther)
	tok = member.csrf("/account/org")
	expectStatus(t, "accept", member.post("/account/org/accept", "csrf_token", tok, "org", ownerAcct.ID), http.StatusSeeOther)
	expectStatus(t, "switch", member.post("/account/org/switch", "csrf_token", tok, "org", ownerAcct.ID), http.StatusSeeOther)
	if c := member.cookie("textgen_session_org"); c == nil || c.Value != ownerAcct.ID {
		t.Fatalf("the organisation's cookie: %+v", c)
	}
	expectStatus(t, "log out", member.post("/account/logout", "csrf_token", tok), http.StatusSeeOther)
	if c := member.cookie("textgen_session_org"); c != nil {
		t.Fatalf("the organisation's cookie after logging out: %+v", c)
	}
}

func ownerKeyID(t *testing.T, e *testEnv, acct string) string {
	t.Helper()
	keys, err := e.store.ListKeys(bg, acct)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.Name == "owner-key" {
			return k.ID
		}
	}
	t.Fatal("no owner-key")
	return ""
}

// createdKey is the full key on the page that created it.
func createdKey(t *testing.T, r resp) string {
	t.Helper()
	expectStatus(t, "key creation", r, http.StatusCreated)
	i := strings.Index(r.body, "tg_live_")
	if i < 0 || len(r.body) < i+44 {
		t.Fatalf("no key on the page:\n%s", r.body)
	}
	return r.body[i : i+44]
}
