package badgerledger

import (
	"reflect"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// TestBadgerMembersRestart: Badger keeps an organisation's members and months in memory; a
// reopened directory has them back from disk, the cap's count included, and a hold left open
// by the previous process gives its count back when Open voids it.
func TestBadgerMembersRestart(t *testing.T) {
	t0 := time.Date(2031, 5, 2, 9, 0, 0, 0, time.UTC)
	setNow(t, &t0)
	dir := t.TempDir()
	s := openDir(t, dir, quiet)
	alice, bob, _ := ledgertest.Org(t, s, ledger.RoleAdmin)
	_, bk, err := s.CreateMemberKey(bg, alice.ID, bob.ID, ledger.Live, "bob's", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetMemberCap(bg, alice.ID, bob.ID, 2); err != nil {
		t.Fatal(err)
	}
	for _, rid := range []string{"settled", "open"} {
		if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: alice.ID, Mode: ledger.Live, RequestID: rid, KeyID: bk.ID}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Settle(bg, alice.ID, "settled"); err != nil {
		t.Fatal(err)
	}
	before := ledgertest.MustMembers(t, s, alice.ID)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDir(t, dir, quiet)
	after := ledgertest.MustMembers(t, s, alice.ID)
	// The open hold was voided at Open: bob used 1 of 2 now, 2 before.
	for i := range before {
		if before[i].MemberID == bob.ID {
			before[i].Used--
		}
	}
	if !reflect.DeepEqual(after, before) {
		t.Fatalf("members after a restart:\n got %+v\nwant %+v", after, before)
	}
	if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: alice.ID, Mode: ledger.Live, RequestID: "again", KeyID: bk.ID}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Hold(bg, ledger.HoldRequest{AccountID: alice.ID, Mode: ledger.Live, RequestID: "over", KeyID: bk.ID})
	ledgertest.WantErr(t, err, ledger.ErrMemberCapReached)
	ledgertest.VerifyClean(t, s)
}
