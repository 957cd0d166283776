package ledger

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestCopyLedger fills a Badger ledger with everything a server makes, copies it into an empty
// PostgreSQL database, and checks that the PostgreSQL side gives what Badger gave: balances,
// the old keys, log-ins and sessions, purchases, histories, key lists, Idempotency-Keys, and a
// clean Verify; then that the copy goes on working (an open hold settles) and that a second copy
// into the same database is refused.
func TestCopyLedger(t *testing.T) {
	t0 := time.Date(2030, 7, 1, 10, 0, 0, 123456789, time.UTC)
	setNow(t, &t0)
	from := openDir(t, t.TempDir(), quiet)

	alice, err := from.CreateAccountWithPassword(bg, "alice@example.com", goodPassword)
	if err != nil {
		t.Fatal(err)
	}
	bob := mustAccount(t, from, "bob@example.com")
	liveKey, _, err := from.CreateKey(bg, alice.ID, Live, "laptop", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	testKey, _, err := from.CreateKey(bg, alice.ID, Test, "ci", t0.Add(30*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	revoked, rk, err := from.CreateKey(bg, bob.ID, Live, "old", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := from.RevokeKey(bg, bob.ID, rk.ID); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"cs_1", "cs_2"} {
		if _, err := from.Grant(bg, GrantRequest{AccountID: alice.ID, Mode: Live, Kind: KindPurchase, Credits: 10,
			Reference: ref, AmountCents: 900, Currency: "EUR"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := from.Grant(bg, GrantRequest{AccountID: bob.ID, Mode: Live, Kind: KindGrant, Credits: 5, Reference: "welcome"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := from.RefillTestCredits(bg, alice.ID, 50); err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(time.Minute)
	if _, _, err := from.LookupKey(bg, liveKey); err != nil {
		t.Fatal(err)
	}
	for i, m := range []Mode{Live, Live, Test, Live} {
		rid := []string{"r1", "r2", "r3", "r4"}[i]
		mustHold(t, from, alice.ID, m, rid)
	}
	if _, err := from.Settle(bg, alice.ID, "r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := from.Void(bg, alice.ID, "r2", "backend_error"); err != nil {
		t.Fatal(err)
	}
	if _, err := from.Settle(bg, alice.ID, "r3"); err != nil {
		t.Fatal(err)
	}
	// r4 stays open.
	token, _, err := from.CreateSession(bg, alice.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := from.BeginIdempotent(bg, IdempotencyRecord{AccountID: alice.ID, Key: "live:order-1", RequestID: "r1", Fingerprint: "fp"}); err != nil {
		t.Fatal(err)
	}
	if err := from.FinishIdempotent(bg, alice.ID, "live:order-1", 200); err != nil {
		t.Fatal(err)
	}
	verifyClean(t, from)

	url := pgtest.NewDatabase(t)
	to := openPostgres(t, url, pgQuiet)
	if err := CopyLedger(bg, from, to); err != nil {
		t.Fatal(err)
	}

	for _, a := range []Account{alice, bob} {
		if got, want := mustBalance(t, to, a.ID), mustBalance(t, from, a.ID); got != want {
			t.Errorf("balance of %s: %+v, Badger %+v", a.Email, got, want)
		}
		if got, want := allHistory(t, to, a.ID), allHistory(t, from, a.ID); !reflect.DeepEqual(got, want) {
			t.Errorf("history of %s:\n got %+v\nwant %+v", a.Email, got, want)
		}
		got, _ := to.ListKeys(bg, a.ID)
		want, _ := from.ListKeys(bg, a.ID)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("keys of %s:\n got %+v\nwant %+v", a.Email, got, want)
		}
		if got, _ := to.GetAccount(bg, a.ID); got != a {
			t.Errorf("account %+v, want %+v", got, a)
		}
	}
	if got, want := mustPurchases(t, to, alice.ID), mustPurchases(t, from, alice.ID); len(got) != 2 || !reflect.DeepEqual(got, want) {
		t.Errorf("purchases %+v, Badger %+v", got, want)
	}
	for _, k := range []string{liveKey, testKey} {
		gk, ga, err := to.LookupKey(bg, k)
		wk, _, _ := from.LookupKey(bg, k)
		if err != nil || gk.ID != wk.ID || ga.ID != alice.ID {
			t.Errorf("lookup of an old key: %+v %+v %v", gk, ga, err)
		}
	}
	if _, _, err := to.LookupKey(bg, revoked); err != ErrInvalidKey {
		t.Errorf("a revoked key works after the copy: %v", err)
	}
	if a, err := to.Authenticate(bg, "alice@example.com", goodPassword); err != nil || a.ID != alice.ID {
		t.Errorf("log-in after the copy: %+v %v", a, err)
	}
	if s, a, err := to.GetSession(bg, token); err != nil || a.ID != alice.ID || s.AccountID != alice.ID {
		t.Errorf("session after the copy: %+v %v", s, err)
	}
	if rec, isNew, err := to.BeginIdempotent(bg, IdempotencyRecord{AccountID: alice.ID, Key: "live:order-1", RequestID: "r9"}); err != nil || isNew || rec.Status != 200 {
		t.Errorf("Idempotency-Key after the copy: %+v %v %v", rec, isNew, err)
	}
	// Repeats report the outcomes recorded on Badger; a reference used there credits nothing.
	if r, err := to.Settle(bg, alice.ID, "r2"); err != nil || !r.Repeated || r.State != HoldVoided {
		t.Errorf("settle of a hold voided on Badger: %+v %v", r, err)
	}
	if r, err := to.Grant(bg, GrantRequest{AccountID: alice.ID, Mode: Live, Kind: KindPurchase, Credits: 10, Reference: "cs_2"}); err != nil || !r.Repeated {
		t.Errorf("a purchase credited on Badger credits again: %+v %v", r, err)
	}
	rep := verifyClean(t, to)
	if want, _ := from.Verify(bg); rep.Accounts != want.Accounts || rep.Entries != want.Entries {
		t.Errorf("verify counts %d accounts / %d entries, Badger %d / %d", rep.Accounts, rep.Entries, want.Accounts, want.Entries)
	}
	// The copy goes on: the hold left open on Badger settles on PostgreSQL.
	if r, err := to.Settle(bg, alice.ID, "r4"); err != nil || r.Repeated || r.State != HoldSettled {
		t.Errorf("settle of the open hold after the copy: %+v %v", r, err)
	}
	verifyClean(t, to)

	// The target is not empty any more.
	if err := CopyLedger(bg, from, to); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a copy into a used database: %v", err)
	}
	if err := CopyLedger(bg, to, openPostgres(t, pgtest.NewDatabase(t), pgQuiet)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a copy from a store that cannot export: %v", err)
	}
}

func mustPurchases(t *testing.T, s Store, acct string) []Entry {
	t.Helper()
	ps, err := s.Purchases(bg, acct, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}
