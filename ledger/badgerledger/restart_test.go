package badgerledger

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// Tests that need Badger itself: closing and reopening a directory, and backing it up into
// another one. They use the public API only to fill and compare stores.

type dump struct {
	Accounts []ledger.Account
	Keys     map[string][]ledger.Key
	Balances map[string]ledger.Balance
	Entries  map[string][]ledger.Entry
}

func dumpStore(t *testing.T, s ledger.Store) dump {
	t.Helper()
	d := dump{Keys: map[string][]ledger.Key{}, Balances: map[string]ledger.Balance{}, Entries: map[string][]ledger.Entry{}}
	as, next, err := s.ListAccounts(bg, ledger.Page{Limit: 1000})
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
		d.Balances[a.ID] = ledgertest.MustBalance(t, s, a.ID)
		d.Entries[a.ID] = ledgertest.AllHistory(t, s, a.ID)
	}
	return d
}

// fill writes a bit of everything and returns the full keys it created, each with whether it
// should still work.
func fill(t *testing.T, s ledger.Store) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	for i := range 3 {
		a := ledgertest.MustAccount(t, s, fmt.Sprintf("fill%d@example.com", i)).ID
		for _, m := range []ledger.Mode{ledger.Live, ledger.Test} {
			full, k, err := s.CreateKey(bg, a, m, "k", time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.LookupKey(bg, full); err != nil {
				t.Fatal(err)
			}
			keys[full] = true
			if i == 2 && m == ledger.Live {
				if _, err := s.RevokeKey(bg, a, k.ID); err != nil {
					t.Fatal(err)
				}
				keys[full] = false
			}
		}
		if _, err := s.Grant(bg, ledger.GrantRequest{AccountID: a, Mode: ledger.Live, Kind: ledger.KindPurchase, Credits: 10,
			Reference: "pi_" + a, AmountCents: 200, Currency: "EUR"}); err != nil {
			t.Fatal(err)
		}
		ledgertest.MustGrant(t, s, a, ledger.Test, 5)
		for j := range 4 {
			rid := fmt.Sprint("r", j)
			ledgertest.MustHold(t, s, a, ledger.Live, rid)
			if j%2 == 0 {
				s.Settle(bg, a, rid)
			} else if j == 1 {
				s.Void(bg, a, rid, "client_gone")
			} // r3 stays open
		}
		if i == 2 {
			if _, err := s.SetAccountStatus(bg, a, ledger.StatusDisabled); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: "idem", RequestID: "r0"}); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishIdempotent(bg, a, "idem", 200); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// restarted is d as a store opened by a new process shows it: every hold that was open is
// voided ("restart"). It drops those voids and counts held credits as available, so that a dump
// taken before a reopen compares with one taken after.
func restarted(d dump) dump {
	out := dump{Accounts: d.Accounts, Keys: d.Keys, Balances: map[string]ledger.Balance{}, Entries: map[string][]ledger.Entry{}}
	for id, b := range d.Balances {
		b.Available, b.TestAvailable = b.Balance, b.TestBalance
		out.Balances[id] = b
	}
	for id, es := range d.Entries {
		var kept []ledger.Entry
		for _, e := range es {
			if e.Kind != ledger.KindVoid || e.Reason != "restart" {
				kept = append(kept, e)
			}
		}
		out.Entries[id] = kept
	}
	return out
}

func checkSame(t *testing.T, s ledger.Store, want dump, keys map[string]bool) {
	t.Helper()
	got := dumpStore(t, s)
	for id, b := range got.Balances {
		if b.Available != b.Balance || b.TestAvailable != b.TestBalance {
			t.Fatalf("account %s has holds open after a reopen: %+v", id, b)
		}
	}
	if got, want := restarted(got), restarted(want); !reflect.DeepEqual(got, want) {
		t.Fatalf("ledger differs\n got %+v\nwant %+v", got, want)
	}
	for full, valid := range keys {
		if _, _, err := s.LookupKey(bg, full); (err == nil) != valid {
			t.Fatalf("lookup of %s...: %v, want valid=%v", full[:12], err, valid)
		}
	}
	for _, a := range want.Accounts {
		r, isNew, err := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a.ID, Key: "idem", RequestID: "other"})
		if err != nil || isNew || r.RequestID != "r0" {
			t.Fatalf("idempotency record lost: %+v %v %v", r, isNew, err)
		}
		if _, err := s.Settle(bg, a.ID, "r0"); err != nil {
			t.Fatal(err)
		}
	}
	ledgertest.VerifyClean(t, s)
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
	ledgertest.MustGrant(t, s, want.Accounts[0].ID, ledger.Live, 7)

	dir := filepath.Join(t.TempDir(), "restored")
	if err := Restore(dir, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	r := openDir(t, dir, quiet)
	checkSame(t, r, want, keys)

	// Restore refuses a directory that holds anything.
	err := Restore(dir, bytes.NewReader(buf.Bytes()))
	ledgertest.WantErr(t, err, ledger.ErrInvalidArgument)
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ledgertest.WantErr(t, Restore(other, bytes.NewReader(buf.Bytes())), ledger.ErrInvalidArgument)

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
	ledgertest.VerifyClean(t, openDir(t, dir2, quiet))
}

// TestReserve: a reservation takes the credit at once (the next one sees it gone) and becomes
// durable with the settle that follows it.
func TestReserve(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, Options{})
	a := ledgertest.MustAccount(t, s, "reserve@example.com").ID
	ledgertest.MustGrant(t, s, a, ledger.Live, 1)
	// The hold's write waits for the settle's commit (no timer fires within the test).
	setLazyWait(s, time.Hour)
	commits := s.c.commits.Load()

	r, err := s.Reserve(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "req_r1", Tool: "summarizer"})
	if err != nil || r.State != ledger.HoldOpen || r.Available != 0 {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	if _, err := s.Reserve(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "req_r2"}); err != ledger.ErrInsufficientCredits {
		t.Fatalf("second reserve on a balance of 1: %v", err)
	}
	// Given time, an eager write would have been committed by now; a lazy one waits. (A slow
	// machine can only make this pass wrongly, never fail wrongly.)
	time.Sleep(50 * time.Millisecond)
	if n := s.c.commits.Load() - commits; n != 0 {
		t.Fatalf("the reservation was committed on its own (%d commits) before its settle", n)
	}
	if res, err := s.Settle(bg, a, "req_r1"); err != nil || res.State != ledger.HoldSettled {
		t.Fatalf("settle: %+v %v", res, err)
	}
	if n := s.c.commits.Load() - commits; n != 1 {
		t.Fatalf("reserve and settle took %d commits, want 1 (the hold rides with its settle)", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDir(t, dir, Options{})
	b, err := s.Balance(bg, a)
	if err != nil || b.Balance != 0 || b.Available != 0 {
		t.Fatalf("after reopen: %+v %v", b, err)
	}
	var kinds []ledger.EntryKind
	es, _, _ := s.History(bg, a, ledger.Page{})
	for _, e := range es {
		kinds = append(kinds, e.Kind)
	}
	if len(kinds) != 3 || kinds[0] != ledger.KindSettle || kinds[1] != ledger.KindHold || kinds[2] != ledger.KindGrant {
		t.Fatalf("history after reopen, newest first: %v", kinds)
	}
	if rep, err := s.Verify(bg); err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

func TestSessionsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, quiet)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.CreateAccountWithPassword(bg, "reopen@example.com", ledgertest.GoodPassword)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := s.CreateSession(bg, a.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDir(t, dir, quiet)
	if _, err := s.Authenticate(bg, "reopen@example.com", ledgertest.GoodPassword); err != nil {
		t.Fatalf("password after reopen: %v", err)
	}
	if _, acct, err := s.GetSession(bg, tok); err != nil || acct.ID != a.ID {
		t.Fatalf("session after reopen: %v", err)
	}
	rep, err := s.Verify(bg)
	if err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// TestOpenVoidsLeftOverHolds: Open voids every hold a previous process left open, expired or
// not ("restart"): Badger's directory lock admits one process, so the one that made the hold is
// gone and its credit need not stay locked for the rest of its hold_ttl. An Idempotency-Key it
// left in progress is free for the retry at once.
func TestOpenVoidsLeftOverHolds(t *testing.T) {
	t0 := time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC)
	setNow(t, &t0)
	dir := t.TempDir()
	o := quiet
	o.HoldTTL = 10 * time.Minute
	s := openDir(t, dir, o)
	a := ledgertest.MustAccount(t, s, "e@example.com").ID
	ledgertest.MustGrant(t, s, a, ledger.Live, 3)
	ledgertest.MustHold(t, s, a, ledger.Live, "young")
	rec := ledger.IdempotencyRecord{AccountID: a, Key: "retry-me", RequestID: "young", Fingerprint: "f", HoldTTL: time.Hour}
	if _, fresh, err := s.BeginIdempotent(bg, rec); err != nil || !fresh {
		t.Fatalf("begin: %v %v", fresh, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(time.Minute) // long before either TTL
	s = openDir(t, dir, o)
	if b := ledgertest.MustBalance(t, s, a); b.Available != 3 || b.Balance != 3 {
		t.Fatalf("after reopen %+v, want the held credit back", b)
	}
	if e := ledgertest.AllHistory(t, s, a)[0]; e.Kind != ledger.KindVoid || e.Reason != "restart" || e.RequestID != "young" {
		t.Fatalf("open's void entry %+v", e)
	}
	rec.RequestID = "retry"
	if got, fresh, err := s.BeginIdempotent(bg, rec); err != nil || !fresh || got.RequestID != "retry" {
		t.Fatalf("retry after the restart: %+v fresh=%v %v; want the key free at once", got, fresh, err)
	}
	// A record of this process that is in progress still holds its key.
	if got, fresh, err := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: "retry-me", RequestID: "third", Fingerprint: "f"}); err != nil || fresh || got.RequestID != "retry" {
		t.Fatalf("a second retry while the first runs: %+v fresh=%v %v; want the running record", got, fresh, err)
	}
	ledgertest.VerifyClean(t, s)
}

// TestReserveAlone: a reservation that no settle follows still reaches the disk, lazyDelay
// after it was made, without anything else committing.
func TestReserveAlone(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, Options{})
	a := ledgertest.MustAccount(t, s, "alone@example.com").ID
	ledgertest.MustGrant(t, s, a, ledger.Live, 1)
	setLazyWait(s, time.Millisecond)
	if _, err := s.Reserve(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "req_alone"}); err != nil {
		t.Fatal(err)
	}
	a0, err := s.account(a)
	if err != nil {
		t.Fatal(err)
	}
	defer s.unpin(a0)
	a0.mu.Lock()
	id := a0.holds["req_alone"].op
	a0.mu.Unlock()
	// A liveness bound, not a speed assertion: lazyWait is 1 ms.
	for give := time.Now().Add(time.Minute); s.c.durable.Load() < id; time.Sleep(time.Millisecond) {
		if time.Now().After(give) {
			t.Fatal("the lazy hold was not committed within a minute")
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The reopened ledger voids the previous process's open hold: it was on disk.
	s = openDir(t, dir, Options{})
	var kinds []ledger.EntryKind
	es, _, _ := s.History(bg, a, ledger.Page{})
	for _, e := range es {
		kinds = append(kinds, e.Kind)
	}
	if !reflect.DeepEqual(kinds, []ledger.EntryKind{ledger.KindVoid, ledger.KindHold, ledger.KindGrant}) {
		t.Fatalf("history after reopen, newest first: %v", kinds)
	}
}

func setLazyWait(s *Badger, d time.Duration) {
	s.c.mu.Lock()
	s.c.lazyWait = d
	s.c.mu.Unlock()
}
