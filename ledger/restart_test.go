package ledger

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

type dump struct {
	Accounts []Account
	Keys     map[string][]Key
	Balances map[string]Balance
	Entries  map[string][]Entry
}

func dumpStore(t *testing.T, s *Badger) dump {
	t.Helper()
	d := dump{Keys: map[string][]Key{}, Balances: map[string]Balance{}, Entries: map[string][]Entry{}}
	as, next, err := s.ListAccounts(bg, Page{Limit: 1000})
	if err != nil || next != "" {
		t.Fatal(err, next)
	}
	d.Accounts = as
	for _, a := range as {
		ks, err := s.ListKeys(bg, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		d.Keys[a.ID] = ks
		d.Balances[a.ID] = mustBalance(t, s, a.ID)
		d.Entries[a.ID] = allHistory(t, s, a.ID)
	}
	return d
}

// fill writes a bit of everything and returns the full keys it created, each with whether it
// should still work.
func fill(t *testing.T, s *Badger) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	for i := range 3 {
		a := mustAccount(t, s, fmt.Sprintf("fill%d@example.com", i)).ID
		for _, m := range []Mode{Live, Test} {
			full, k, err := s.CreateKey(bg, a, m, "k", time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.LookupKey(bg, full); err != nil {
				t.Fatal(err)
			}
			keys[full] = true
			if i == 2 && m == Live {
				if _, err := s.RevokeKey(bg, a, k.ID); err != nil {
					t.Fatal(err)
				}
				keys[full] = false
			}
		}
		if _, err := s.Grant(bg, GrantRequest{AccountID: a, Mode: Live, Kind: KindPurchase, Credits: 10,
			Reference: "pi_" + a, AmountCents: 200, Currency: "EUR"}); err != nil {
			t.Fatal(err)
		}
		mustGrant(t, s, a, Test, 5)
		for j := range 4 {
			rid := fmt.Sprint("r", j)
			mustHold(t, s, a, Live, rid)
			if j%2 == 0 {
				s.Settle(bg, a, rid)
			} else if j == 1 {
				s.Void(bg, a, rid, "client_gone")
			} // r3 stays open
		}
		if i == 2 {
			if _, err := s.SetAccountStatus(bg, a, StatusDisabled); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := s.BeginIdempotent(bg, IdempotencyRecord{AccountID: a, Key: "idem", RequestID: "r0"}); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func checkSame(t *testing.T, s *Badger, want dump, keys map[string]bool) {
	t.Helper()
	got := dumpStore(t, s)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ledger differs\n got %+v\nwant %+v", got, want)
	}
	for full, valid := range keys {
		if _, _, err := s.LookupKey(bg, full); (err == nil) != valid {
			t.Fatalf("lookup of %s...: %v, want valid=%v", full[:12], err, valid)
		}
	}
	for _, a := range want.Accounts {
		r, isNew, err := s.BeginIdempotent(bg, IdempotencyRecord{AccountID: a.ID, Key: "idem", RequestID: "other"})
		if err != nil || isNew || r.RequestID != "r0" {
			t.Fatalf("idempotency record lost: %+v %v %v", r, isNew, err)
		}
		if _, err := s.Settle(bg, a.ID, "r0"); err != nil {
			t.Fatal(err)
		}
	}
	verifyClean(t, s)
}

func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, quiet)
	keys := fill(t, s)
	if err := s.Close(); err != nil { // Close flushes last-use times, so they survive too
		t.Fatal(err)
	}
	s = openDir(t, dir, quiet)
	want := dumpStore(t, s)
	if len(want.Accounts) != 3 || want.Balances[want.Accounts[0].ID].Available == 0 {
		t.Fatalf("suspicious dump %+v", want)
	}
	s.Close()
	s = openDir(t, dir, quiet)
	checkSame(t, s, want, keys)
}

func TestBackupRestore(t *testing.T) {
	s := openDir(t, t.TempDir(), quiet)
	keys := fill(t, s)
	want := dumpStore(t, s)
	var buf bytes.Buffer
	if err := s.Backup(bg, &buf); err != nil {
		t.Fatal(err)
	}
	// The live store keeps working after the backup; the restored copy must not see this.
	mustGrant(t, s, want.Accounts[0].ID, Live, 7)

	dir := filepath.Join(t.TempDir(), "restored")
	if err := Restore(dir, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	r := openDir(t, dir, quiet)
	checkSame(t, r, want, keys)

	// Restore refuses a directory that holds anything.
	err := Restore(dir, bytes.NewReader(buf.Bytes()))
	wantErr(t, err, ErrInvalidArgument)
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantErr(t, Restore(other, bytes.NewReader(buf.Bytes())), ErrInvalidArgument)

	// An in-memory store backs up too.
	m := newMem(t)
	fill(t, m)
	buf.Reset()
	if err := m.Backup(bg, &buf); err != nil {
		t.Fatal(err)
	}
	dir2 := t.TempDir()
	if err := Restore(dir2, &buf); err != nil {
		t.Fatal(err)
	}
	verifyClean(t, openDir(t, dir2, quiet))
}
