package ledger

import (
	"reflect"
	"testing"
	"time"
)

// TestBadgerMembersRestart: Badger keeps an organisation's members and months in memory; a
// reopened directory has them back from disk, the cap's count included, and a hold left open
// by the previous process gives its count back when Open voids it.
func TestBadgerMembersRestart(t *testing.T) {
	t0 := time.Date(2031, 5, 2, 9, 0, 0, 0, time.UTC)
	setNow(t, &t0)
	dir := t.TempDir()
	s := openDir(t, dir, quiet)
	alice, bob, _ := Org(t, s, RoleAdmin)
	_, bk, err := s.CreateMemberKey(bg, alice.ID, bob.ID, Live, "bob's", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetMemberCap(bg, alice.ID, bob.ID, 2); err != nil {
		t.Fatal(err)
	}
	for _, rid := range []string{"settled", "open"} {
		if _, err := s.Hold(bg, HoldRequest{AccountID: alice.ID, Mode: Live, RequestID: rid, KeyID: bk.ID}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Settle(bg, alice.ID, "settled"); err != nil {
		t.Fatal(err)
	}
	before := MustMembers(t, s, alice.ID)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDir(t, dir, quiet)
	after := MustMembers(t, s, alice.ID)
	// The open hold was voided at Open: bob used 1 of 2 now, 2 before.
	for i := range before {
		if before[i].MemberID == bob.ID {
			before[i].Used--
		}
	}
	if !reflect.DeepEqual(after, before) {
		t.Fatalf("members after a restart:\n got %+v\nwant %+v", after, before)
	}
	if _, err := s.Hold(bg, HoldRequest{AccountID: alice.ID, Mode: Live, RequestID: "again", KeyID: bk.ID}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Hold(bg, HoldRequest{AccountID: alice.ID, Mode: Live, RequestID: "over", KeyID: bk.ID})
	WantErr(t, err, ErrMemberCapReached)
	VerifyClean(t, s)
}
