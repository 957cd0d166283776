package ledgertest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// Organisations (ledger/members.go) on every engine: the membership rules, removal revoking keys, and
// the member's monthly cap counted with the hold.

// Org makes a personal account with credits and a key, turns it into an organisation and adds
// bob as an accepted member with role; it returns the organisation, bob and the founder's key id.
func Org(t *testing.T, s ledger.Store, role ledger.Role) (alice, bob ledger.Account, aliceKey ledger.Key) {
	t.Helper()
	alice = MustAccount(t, s, "alice@example.com")
	MustGrant(t, s, alice.ID, ledger.Live, 10)
	var err error
	if _, aliceKey, err = s.CreateKey(bg, alice.ID, ledger.Live, "alice's", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MakeOrganisation(bg, alice.ID); err != nil {
		t.Fatal(err)
	}
	bob = MustAccount(t, s, "bob@example.com")
	if _, err := s.AddMember(bg, alice.ID, bob.ID, role, false); err != nil {
		t.Fatal(err)
	}
	return alice, bob, aliceKey
}

// MustMembers lists the organisation's members, failing the test on an error.
func MustMembers(t testing.TB, s ledger.Store, orgID string) []ledger.Membership {
	t.Helper()
	ms, err := s.ListMembers(bg, orgID)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func roles(ms []ledger.Membership) string {
	out := ""
	for _, m := range ms {
		out += fmt.Sprintf("%s:%s", m.Email, m.Role)
		if m.Pending {
			out += "(pending)"
		}
		out += " "
	}
	return out
}

func testMembershipRules(t *testing.T, eng engine) {
	t0 := time.Date(2031, 3, 10, 12, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	alice := MustAccount(t, s, "alice@example.com")
	bob := MustAccount(t, s, "bob@example.com")
	carol := MustAccount(t, s, "carol@example.com")
	MustGrant(t, s, alice.ID, ledger.Live, 10)
	full, k, err := s.CreateKey(bg, alice.ID, ledger.Live, "old", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	// A personal account has no members and takes none.
	if ms := MustMembers(t, s, alice.ID); len(ms) != 0 {
		t.Fatalf("members of a personal account: %+v", ms)
	}
	_, err = s.AddMember(bg, alice.ID, bob.ID, ledger.RoleMember, false)
	WantErr(t, err, ledger.ErrNotOrganisation)
	_, err = s.MakeOrganisation(bg, "acct_nobodynobodynobo")
	WantErr(t, err, ledger.ErrNotFound)

	// Becoming an organisation keeps the credits, the key and the login; twice changes nothing.
	m, err := s.MakeOrganisation(bg, alice.ID)
	if err != nil || m.Role != ledger.RoleOwner || m.MemberID != alice.ID || m.Pending {
		t.Fatalf("MakeOrganisation: %+v %v", m, err)
	}
	t0 = t0.Add(time.Second)
	if m2, err := s.MakeOrganisation(bg, alice.ID); err != nil || m2 != m {
		t.Fatalf("MakeOrganisation again: %+v %v, want %+v", m2, err, m)
	}
	if b := MustBalance(t, s, alice.ID); b.Balance != 10 {
		t.Fatalf("balance after becoming an organisation: %+v", b)
	}
	if gk, _, err := s.LookupKey(bg, full); err != nil || gk.ID != k.ID || ledger.KeyMember(gk) != alice.ID {
		t.Fatalf("the old key: %+v %v", gk, err)
	}

	// Bad additions.
	_, err = s.AddMember(bg, alice.ID, alice.ID, ledger.RoleMember, false)
	WantErr(t, err, ledger.ErrInvalidArgument)
	_, err = s.AddMember(bg, alice.ID, bob.ID, "boss", false)
	WantErr(t, err, ledger.ErrInvalidArgument)
	_, err = s.AddMember(bg, alice.ID, "acct_nobodynobodynobo", ledger.RoleMember, false)
	WantErr(t, err, ledger.ErrNotFound)

	// bob joins as admin; carol is invited and has nothing until she accepts.
	if m, err := s.AddMember(bg, alice.ID, bob.ID, ledger.RoleAdmin, false); err != nil || m.Email != bob.Email || m.OrgEmail != alice.Email {
		t.Fatalf("AddMember: %+v %v", m, err)
	}
	_, err = s.AddMember(bg, alice.ID, bob.ID, ledger.RoleMember, false)
	WantErr(t, err, ledger.ErrAlreadyMember)
	t0 = t0.Add(time.Second)
	if m, err := s.AddMember(bg, alice.ID, carol.ID, ledger.RoleOwner, true); err != nil || !m.Pending {
		t.Fatalf("invite: %+v %v", m, err)
	}
	_, _, err = s.CreateMemberKey(bg, alice.ID, carol.ID, ledger.Live, "carol's", time.Time{}, 0)
	WantErr(t, err, ledger.ErrNotMember)
	if got := roles(MustMembers(t, s, alice.ID)); got != "alice@example.com:owner bob@example.com:admin carol@example.com:owner(pending) " {
		t.Fatalf("members: %s", got)
	}
	// A pending owner is no owner: alice is still the last one.
	_, err = s.SetMemberRole(bg, alice.ID, alice.ID, ledger.RoleAdmin)
	WantErr(t, err, ledger.ErrLastOwner)
	_, err = s.RemoveMember(bg, alice.ID, alice.ID)
	WantErr(t, err, ledger.ErrInvalidArgument) // the organisation's own login never leaves it
	if m, err := s.AcceptMembership(bg, alice.ID, carol.ID); err != nil || m.Pending {
		t.Fatalf("accept: %+v %v", m, err)
	}
	if m, err := s.AcceptMembership(bg, alice.ID, carol.ID); err != nil || m.Pending {
		t.Fatalf("accept again: %+v %v", m, err)
	}
	_, err = s.AcceptMembership(bg, alice.ID, "acct_nobodynobodynobo")
	WantErr(t, err, ledger.ErrNotMember)

	// With carol an owner, alice may step down; then carol is the last owner.
	if m, err := s.SetMemberRole(bg, alice.ID, alice.ID, ledger.RoleMember); err != nil || m.Role != ledger.RoleMember {
		t.Fatalf("demote alice: %+v %v", m, err)
	}
	_, err = s.SetMemberRole(bg, alice.ID, carol.ID, ledger.RoleAdmin)
	WantErr(t, err, ledger.ErrLastOwner)
	_, err = s.RemoveMember(bg, alice.ID, carol.ID)
	WantErr(t, err, ledger.ErrLastOwner)
	_, err = s.SetMemberRole(bg, alice.ID, bob.ID, "")
	WantErr(t, err, ledger.ErrInvalidArgument)
	_, err = s.SetMemberRole(bg, alice.ID, "acct_nobodynobodynobo", ledger.RoleMember)
	WantErr(t, err, ledger.ErrNotMember)
	_, err = s.SetMemberCap(bg, alice.ID, bob.ID, -1)
	WantErr(t, err, ledger.ErrInvalidArgument)
	if m, err := s.SetMemberCap(bg, alice.ID, bob.ID, 5); err != nil || m.MonthlyCap != 5 {
		t.Fatalf("cap: %+v %v", m, err)
	}

	// bob leaves; his memberships and carol's are listed from their side.
	if _, err := s.RemoveMember(bg, alice.ID, bob.ID); err != nil {
		t.Fatal(err)
	}
	_, err = s.RemoveMember(bg, alice.ID, bob.ID)
	WantErr(t, err, ledger.ErrNotMember)
	_, err = s.GetMembership(bg, alice.ID, bob.ID)
	WantErr(t, err, ledger.ErrNotMember)
	if ms, err := s.MembershipsOf(bg, bob.ID); err != nil || len(ms) != 0 {
		t.Fatalf("bob's memberships after leaving: %+v %v", ms, err)
	}
	ms, err := s.MembershipsOf(bg, carol.ID)
	if err != nil || len(ms) != 1 || ms[0].OrgID != alice.ID || ms[0].Role != ledger.RoleOwner || ms[0].OrgEmail != alice.Email {
		t.Fatalf("carol's memberships: %+v %v", ms, err)
	}
	if got := roles(MustMembers(t, s, alice.ID)); got != "alice@example.com:member carol@example.com:owner " {
		t.Fatalf("members: %s", got)
	}
	_, err = s.ListMembers(bg, "acct_nobodynobodynobo")
	WantErr(t, err, ledger.ErrNotFound)
	VerifyClean(t, s)
}

func testRemoveMemberRevokesKeys(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	alice, bob, _ := Org(t, s, ledger.RoleMember)
	aliceFull, _, err := s.CreateMemberKey(bg, alice.ID, alice.ID, ledger.Live, "alice's own", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var bobs []string
	for _, m := range []ledger.Mode{ledger.Live, ledger.Test} {
		full, k, err := s.CreateMemberKey(bg, alice.ID, bob.ID, m, "bob's", time.Time{}, 0)
		if err != nil || k.MemberID != bob.ID || k.AccountID != alice.ID {
			t.Fatalf("bob's key: %+v %v", k, err)
		}
		bobs = append(bobs, full)
	}
	// A member's key spends the organisation's credits.
	gk, ga, err := s.LookupKey(bg, bobs[0])
	if err != nil || ga.ID != alice.ID || gk.MemberID != bob.ID {
		t.Fatalf("lookup of bob's key: %+v %+v %v", gk, ga, err)
	}
	if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: alice.ID, Mode: ledger.Live, RequestID: "r1", KeyID: gk.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(bg, alice.ID, "r1"); err != nil {
		t.Fatal(err)
	}
	if b := MustBalance(t, s, alice.ID); b.Balance != 9 {
		t.Fatalf("balance: %+v", b)
	}

	revoked, err := s.RemoveMember(bg, alice.ID, bob.ID)
	if err != nil || len(revoked) != 2 {
		t.Fatalf("RemoveMember revoked %+v, %v; want bob's 2 keys", revoked, err)
	}
	for _, k := range revoked {
		if k.MemberID != bob.ID || k.Revoked.IsZero() {
			t.Fatalf("revoked key: %+v", k)
		}
	}
	for _, full := range bobs {
		if _, _, err := s.LookupKey(bg, full); !errors.Is(err, ledger.ErrInvalidKey) {
			t.Fatalf("bob's key after his removal: %v", err)
		}
	}
	if _, _, err := s.LookupKey(bg, aliceFull); err != nil {
		t.Fatalf("alice's key after bob's removal: %v", err)
	}
	_, _, err = s.CreateMemberKey(bg, alice.ID, bob.ID, ledger.Live, "again", time.Time{}, 0)
	WantErr(t, err, ledger.ErrNotMember)
	keys, err := s.ListKeys(bg, alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range keys {
		if k.MemberID == bob.ID && !k.Revoked.IsZero() {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("keys after the removal: %+v", keys)
	}
	VerifyClean(t, s)
}

func testMemberCap(t *testing.T, eng engine) {
	t0 := time.Date(2031, 3, 31, 23, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, time.Minute)
	alice, bob, aliceKey := Org(t, s, ledger.RoleMember)
	_, bk, err := s.CreateMemberKey(bg, alice.ID, bob.ID, ledger.Live, "bob's", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, bt, err := s.CreateMemberKey(bg, alice.ID, bob.ID, ledger.Test, "bob's test", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	MustGrant(t, s, alice.ID, ledger.Test, 10)
	if _, err := s.SetMemberCap(bg, alice.ID, bob.ID, 2); err != nil {
		t.Fatal(err)
	}
	hold := func(rid string, k ledger.Key, m ledger.Mode) error {
		_, err := s.Hold(bg, ledger.HoldRequest{AccountID: alice.ID, Mode: m, RequestID: rid, KeyID: k.ID, Tool: "summarize"})
		return err
	}
	for _, rid := range []string{"b1", "b2"} {
		if err := hold(rid, bk, ledger.Live); err != nil {
			t.Fatal(err)
		}
	}
	before := AllHistory(t, s, alice.ID)
	WantErr(t, hold("b3", bk, ledger.Live), ledger.ErrMemberCapReached)
	if after := AllHistory(t, s, alice.ID); len(after) != len(before) {
		t.Fatalf("a hold refused by the cap wrote %d entries", len(after)-len(before))
	}
	if b := MustBalance(t, s, alice.ID); b.Available != 8 {
		t.Fatalf("balance: %+v", b)
	}
	// The organisation's other members and its test credits are not capped by bob's cap.
	if err := hold("a1", aliceKey, ledger.Live); err != nil {
		t.Fatal(err)
	}
	if err := hold("t1", bt, ledger.Test); err != nil {
		t.Fatal(err)
	}
	if m, err := s.GetMembership(bg, alice.ID, bob.ID); err != nil || m.Used != 2 || m.MonthlyCap != 2 {
		t.Fatalf("bob's membership: %+v %v", m, err)
	}
	// A settle keeps the credit counted; a void gives it back; so does an expiry.
	if _, err := s.Settle(bg, alice.ID, "b1"); err != nil {
		t.Fatal(err)
	}
	WantErr(t, hold("b3", bk, ledger.Live), ledger.ErrMemberCapReached)
	if _, err := s.Void(bg, alice.ID, "b2", "backend_error"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Void(bg, alice.ID, "b2", "backend_error"); err != nil { // repeated: gives nothing more
		t.Fatal(err)
	}
	if err := hold("b3", bk, ledger.Live); err != nil {
		t.Fatalf("after a void: %v", err)
	}
	WantErr(t, hold("b4", bk, ledger.Live), ledger.ErrMemberCapReached)
	t0 = t0.Add(2 * time.Minute)
	if n, err := eng.expire(t, s); err != nil || n != 3 { // b3, a1, t1
		t.Fatalf("expire: %d %v", n, err)
	}
	if err := hold("b4", bk, ledger.Live); err != nil {
		t.Fatalf("after an expiry: %v", err)
	}
	// Raising the cap lets more through at once; 0 is no cap.
	if _, err := s.SetMemberCap(bg, alice.ID, bob.ID, 3); err != nil {
		t.Fatal(err)
	}
	if err := hold("b5", bk, ledger.Live); err != nil {
		t.Fatal(err)
	}
	WantErr(t, hold("b6", bk, ledger.Live), ledger.ErrMemberCapReached)
	if _, err := s.SetMemberCap(bg, alice.ID, bob.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := hold("b6", bk, ledger.Live); err != nil {
		t.Fatal(err)
	}
	VerifyClean(t, s)
}

func testMemberCapMonths(t *testing.T, eng engine) {
	t0 := time.Date(2031, 3, 31, 23, 59, 59, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	alice, bob, _ := Org(t, s, ledger.RoleMember)
	_, bk, err := s.CreateMemberKey(bg, alice.ID, bob.ID, ledger.Live, "bob's", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetMemberCap(bg, alice.ID, bob.ID, 1); err != nil {
		t.Fatal(err)
	}
	hold := func(rid string) error {
		_, err := s.Hold(bg, ledger.HoldRequest{AccountID: alice.ID, Mode: ledger.Live, RequestID: rid, KeyID: bk.ID})
		return err
	}
	if err := hold("march"); err != nil {
		t.Fatal(err)
	}
	WantErr(t, hold("march2"), ledger.ErrMemberCapReached)
	if got := ledger.MemberCapResets(t0); !got.Equal(time.Date(2031, 4, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("resets %s", got)
	}
	// One second later it is April, UTC: a new month of the cap.
	t0 = t0.Add(time.Second)
	if err := hold("april"); err != nil {
		t.Fatalf("in a new month: %v", err)
	}
	WantErr(t, hold("april2"), ledger.ErrMemberCapReached)
	// March's hold voided in April goes back to March, not to April.
	if _, err := s.Void(bg, alice.ID, "march", "client_gone"); err != nil {
		t.Fatal(err)
	}
	WantErr(t, hold("april2"), ledger.ErrMemberCapReached)
	if _, err := s.Settle(bg, alice.ID, "april"); err != nil {
		t.Fatal(err)
	}
	got, err := s.MemberUsage(bg, alice.ID, "2031-03", "2031-04")
	if err != nil {
		t.Fatal(err)
	}
	want := []ledger.MemberMonth{{MemberID: bob.ID, Email: bob.Email, Month: "2031-03", Credits: 0},
		{MemberID: bob.ID, Email: bob.Email, Month: "2031-04", Credits: 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("member usage %+v, want %+v", got, want)
	}
	if got, err := s.MemberUsage(bg, alice.ID, "2031-04", "2031-04"); err != nil || len(got) != 1 {
		t.Fatalf("April only: %+v %v", got, err)
	}
	_, err = s.MemberUsage(bg, alice.ID, "2031-4", "2031-04")
	WantErr(t, err, ledger.ErrInvalidArgument)
	if m, err := s.GetMembership(bg, alice.ID, bob.ID); err != nil || m.Used != 1 {
		t.Fatalf("bob this month: %+v %v", m, err)
	}
	VerifyClean(t, s)
}

// Holds racing on one member's cap: exactly the cap gets through, whatever the organisation's
// credits, and the others are refused with ErrMemberCapReached and cost nothing.
func testMemberCapRace(t *testing.T, eng engine) {
	const attempts, capN = 200, 17
	s := eng.open(t, 0)
	alice, bob, _ := Org(t, s, ledger.RoleMember)
	MustGrant(t, s, alice.ID, ledger.Live, 1000)
	_, bk, err := s.CreateMemberKey(bg, alice.ID, bob.ID, ledger.Live, "bob's", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetMemberCap(bg, alice.ID, bob.ID, capN); err != nil {
		t.Fatal(err)
	}
	var ok, capped atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, attempts)
	for i := range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := ledger.HoldRequest{AccountID: alice.ID, Mode: ledger.Live, RequestID: fmt.Sprint("r", i), KeyID: bk.ID}
			var err error
			if i%2 == 0 {
				_, err = s.Hold(bg, req)
			} else {
				_, err = s.Reserve(bg, req)
			}
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ledger.ErrMemberCapReached):
				capped.Add(1)
			default:
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if ok.Load() != capN || capped.Load() != attempts-capN {
		t.Fatalf("%d holds got through and %d were capped; want %d and %d", ok.Load(), capped.Load(), capN, attempts-capN)
	}
	if b := MustBalance(t, s, alice.ID); b.Available != 1010-capN {
		t.Fatalf("balance: %+v", b)
	}
	if m, err := s.GetMembership(bg, alice.ID, bob.ID); err != nil || m.Used != capN {
		t.Fatalf("bob's count: %+v %v", m, err)
	}
	VerifyClean(t, s)
}

// testMemberCapKeyBudget: a hold that the key's budget allows and the member's cap refuses
// leaves the key's count as it was, so the refused request costs the key's budget nothing.
func testMemberCapKeyBudget(t *testing.T, eng engine) {
	s := eng.open(t, time.Minute)
	alice, bob, _ := Org(t, s, ledger.RoleMember)
	_, bk, err := s.CreateMemberKey(bg, alice.ID, bob.ID, ledger.Live, "bob's", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateKey(bg, alice.ID, bk.ID, ledger.KeySettings{Name: "bob's", Limits: ledger.KeyLimits{BudgetTotal: 5}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetMemberCap(bg, alice.ID, bob.ID, 1); err != nil {
		t.Fatal(err)
	}
	hold := func(rid string) error {
		_, err := s.Hold(bg, ledger.HoldRequest{AccountID: alice.ID, Mode: ledger.Live, RequestID: rid, KeyID: bk.ID, Tool: "summarize"})
		return err
	}
	if err := hold("k1"); err != nil {
		t.Fatal(err)
	}
	WantErr(t, hold("k2"), ledger.ErrMemberCapReached)
	WantErr(t, hold("k3"), ledger.ErrMemberCapReached)
	keys, err := s.ListKeys(bg, alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.ID == bk.ID && k.Usage.Total != 1 {
			t.Fatalf("the key counts %d credits after one hold and two refused by the member's cap", k.Usage.Total)
		}
	}
}
