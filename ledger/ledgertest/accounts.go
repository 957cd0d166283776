package ledgertest

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

func testAccounts(t *testing.T, eng engine) {
	t0 := time.Date(2030, 5, 6, 7, 8, 9, 10, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)

	a, err := s.CreateAccount(bg, "  Alice@Example.COM ")
	if err != nil {
		t.Fatal(err)
	}
	if a.Email != "alice@example.com" || a.Status != ledger.StatusActive || !a.Created.Equal(t0) ||
		!strings.HasPrefix(a.ID, "acct_") || len(a.ID) != ledger.AccountIDLen {
		t.Fatalf("account %+v", a)
	}
	if b := MustBalance(t, s, a.ID); !reflect.DeepEqual(b, ledger.Balance{AccountID: a.ID}) {
		t.Fatalf("new account balance %+v", b)
	}
	_, err = s.CreateAccount(bg, "ALICE@example.com")
	WantErr(t, err, ledger.ErrDuplicateEmail)
	for _, bad := range []string{"", "   ", "alice", "@example.com", "alice@", "a b@example.com",
		"Alice <alice@example.com>", "a@example.com, b@example.com", "a@@example.com",
		strings.Repeat("a", 250) + "@example.com", "a@exa mple.com"} {
		_, err := s.CreateAccount(bg, bad)
		WantErr(t, err, ledger.ErrInvalidArgument)
	}

	got, err := s.GetAccount(bg, a.ID)
	if err != nil || got != a {
		t.Fatalf("get: %+v %v", got, err)
	}
	got, err = s.GetAccountByEmail(bg, " ALICE@example.com")
	if err != nil || got != a {
		t.Fatalf("get by email: %+v %v", got, err)
	}
	_, err = s.GetAccount(bg, "acct_missing")
	WantErr(t, err, ledger.ErrNotFound)
	_, err = s.GetAccountByEmail(bg, "bob@example.com")
	WantErr(t, err, ledger.ErrNotFound)

	d, err := s.SetAccountStatus(bg, a.ID, ledger.StatusDisabled)
	if err != nil || d.Status != ledger.StatusDisabled {
		t.Fatalf("disable: %+v %v", d, err)
	}
	if got, _ := s.GetAccount(bg, a.ID); got.Status != ledger.StatusDisabled {
		t.Fatalf("status after disable: %s", got.Status)
	}
	if d, err := s.SetAccountStatus(bg, a.ID, ledger.StatusDisabled); err != nil || d.Status != ledger.StatusDisabled {
		t.Fatalf("disable twice: %+v %v", d, err)
	}
	_, err = s.SetAccountStatus(bg, a.ID, "frozen")
	WantErr(t, err, ledger.ErrInvalidArgument)
	_, err = s.SetAccountStatus(bg, "acct_missing", ledger.StatusActive)
	WantErr(t, err, ledger.ErrNotFound)
	if d, err := s.SetAccountStatus(bg, a.ID, ledger.StatusActive); err != nil || d.Status != ledger.StatusActive {
		t.Fatalf("enable: %+v %v", d, err)
	}
}

func testListAccountsPages(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	want := map[string]bool{}
	// Made in another order than their addresses', which is the order they are listed in.
	for _, i := range []int{4, 0, 6, 2, 5, 1, 3} {
		a := MustAccount(t, s, strings.Repeat("x", i+1)+"@example.com")
		want[a.ID] = true
	}
	var pages []int
	seen := map[string]bool{}
	last := ""
	cur := ""
	for {
		as, next, err := s.ListAccounts(bg, ledger.Page{Cursor: cur, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, len(as))
		for _, a := range as {
			if a.Email <= last || seen[a.ID] || !want[a.ID] {
				t.Fatalf("account %s (%s) out of e-mail order or unexpected", a.ID, a.Email)
			}
			seen[a.ID], last = true, a.Email
		}
		if next == "" {
			break
		}
		cur = next
	}
	if len(seen) != 7 || len(pages) != 3 || pages[0] != 3 || pages[2] != 1 {
		t.Fatalf("pages %v, %d accounts", pages, len(seen))
	}
	all, next, err := s.ListAccounts(bg, ledger.Page{})
	if err != nil || len(all) != 7 || next != "" {
		t.Fatalf("default page: %d %q %v", len(all), next, err)
	}
	for _, bad := range []ledger.Page{{Cursor: "!!"}, {Cursor: "eHl6"}, {Limit: -1}} {
		_, _, err := s.ListAccounts(bg, bad)
		WantErr(t, err, ledger.ErrInvalidArgument)
	}
}
