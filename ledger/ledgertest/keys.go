package ledgertest

import (
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

func testCreateLookupRevokeKey(t *testing.T, eng engine) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a := MustAccount(t, s, "keys@example.com")

	full, k, err := s.CreateKey(bg, a.ID, ledger.Live, "laptop", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := ledger.CheckKeyFormat(full); !ok || m != ledger.Live {
		t.Fatalf("created key %q fails its format check", full)
	}
	if k.Prefix != "tg_live_" || k.Last4 != full[40:] || k.AccountID != a.ID || k.Name != "laptop" ||
		k.Mode != ledger.Live || !k.Created.Equal(t0) || !strings.HasPrefix(k.ID, "key_") || len(k.ID) != ledger.KeyIDLen {
		t.Fatalf("key %+v", k)
	}
	t0 = t0.Add(time.Second) // ListKeys orders by creation time
	testFull, tk, err := s.CreateKey(bg, a.ID, ledger.Test, "", time.Time{})
	if err != nil || !strings.HasPrefix(testFull, "tg_test_") || tk.Mode != ledger.Test {
		t.Fatalf("test key %q %+v %v", testFull, tk, err)
	}

	got, acct, err := s.LookupKey(bg, full)
	if err != nil {
		t.Fatal(err)
	}
	// A lookup is not a use (a hold is: testKeyLastUsed).
	if got.ID != k.ID || acct.ID != a.ID || acct.Status != ledger.StatusActive || !got.LastUsed.IsZero() {
		t.Fatalf("lookup: %+v %+v", got, acct)
	}
	keys, err := s.ListKeys(bg, a.ID)
	if err != nil || len(keys) != 2 || keys[0].ID != k.ID || !keys[0].LastUsed.IsZero() || !keys[1].LastUsed.IsZero() {
		t.Fatalf("list: %+v %v", keys, err)
	}

	// Garbage, well-formed unknown keys, keys of the other mode, and the real key cut short or
	// with anything appended all fail alike.
	for _, bad := range []string{"", "hello", full[:43], ledger.NewFullKey(ledger.Live), strings.ToUpper(full),
		full + "x", full + "0", full + " ", full + "\n", full + full[len(full)-1:], full + full, " " + full} {
		if _, _, err := s.LookupKey(bg, bad); err != ledger.ErrInvalidKey {
			t.Fatalf("lookup %q: %v", bad, err)
		}
	}

	// A disabled account's key still resolves, so the handler can answer 403.
	if _, err := s.SetAccountStatus(bg, a.ID, ledger.StatusDisabled); err != nil {
		t.Fatal(err)
	}
	if _, acct, err := s.LookupKey(bg, full); err != nil || acct.Status != ledger.StatusDisabled {
		t.Fatalf("lookup on disabled account: %+v %v", acct, err)
	}

	// Revocation takes effect on the next lookup.
	rk, err := s.RevokeKey(bg, a.ID, k.ID)
	if err != nil || rk.Revoked.IsZero() {
		t.Fatalf("revoke: %+v %v", rk, err)
	}
	if _, _, err := s.LookupKey(bg, full); err != ledger.ErrInvalidKey {
		t.Fatalf("lookup of revoked key: %v", err)
	}
	if _, err := s.RevokeKey(bg, a.ID, k.ID); err != ledger.ErrAlreadyRevoked {
		t.Fatalf("second revoke: %v", err)
	}
	b := MustAccount(t, s, "other@example.com")
	WantErr(t, func() error { _, err := s.RevokeKey(bg, b.ID, tk.ID); return err }(), ledger.ErrNotFound)
	WantErr(t, func() error { _, err := s.RevokeKey(bg, a.ID, "key_000000000000"); return err }(), ledger.ErrNotFound)

	// Expiry.
	efull, _, err := s.CreateKey(bg, b.ID, ledger.Live, "short", t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.LookupKey(bg, efull); err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(time.Hour)
	if _, _, err := s.LookupKey(bg, efull); err != ledger.ErrKeyExpired {
		t.Fatalf("lookup of expired key: %v", err)
	}

	// Bad arguments.
	for _, c := range []struct {
		acct, name string
		m          ledger.Mode
		exp        time.Time
		want       error
	}{
		{a.ID, "", "prod", time.Time{}, ledger.ErrInvalidArgument},
		{a.ID, strings.Repeat("n", 101), ledger.Live, time.Time{}, ledger.ErrInvalidArgument},
		{a.ID, "\xff", ledger.Live, time.Time{}, ledger.ErrInvalidArgument},
		{a.ID, "", ledger.Live, t0.Add(-time.Second), ledger.ErrInvalidArgument},
		{"acct_nope", "", ledger.Live, time.Time{}, ledger.ErrNotFound},
	} {
		_, _, err := s.CreateKey(bg, c.acct, c.m, c.name, c.exp)
		WantErr(t, err, c.want)
	}
	_, err = s.ListKeys(bg, "acct_nope")
	WantErr(t, err, ledger.ErrNotFound)

	// Only the digest is stored: the full key appears nowhere in the database.
	assertNotStored(t, eng, s, full, testFull, efull, full[8:38])
}

// testCreateKeyCapped: keys created all at once never exceed the account's cap; revoked keys do
// not count; CreateKey has no cap.
func testCreateKeyCapped(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "cap@example.com").ID
	const limit, tries = 5, 30
	var wg sync.WaitGroup
	var mu sync.Mutex
	made, refused := 0, 0
	for range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := s.CreateKeyCapped(bg, a, ledger.Live, "k", time.Time{}, limit)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				made++
			case errors.Is(err, ledger.ErrTooManyKeys):
				refused++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if made != limit || refused != tries-limit {
		t.Fatalf("%d parallel creations with a cap of %d: %d made, %d refused", tries, limit, made, refused)
	}
	keys, err := s.ListKeys(bg, a)
	if err != nil || len(keys) != limit {
		t.Fatalf("%d keys listed, want %d (%v)", len(keys), limit, err)
	}
	if _, err := s.RevokeKey(bg, a, keys[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateKeyCapped(bg, a, ledger.Test, "", time.Time{}, limit); err != nil {
		t.Fatalf("a key after one was revoked: %v", err)
	}
	_, _, err = s.CreateKeyCapped(bg, a, ledger.Live, "", time.Time{}, limit)
	WantErr(t, err, ledger.ErrTooManyKeys)
	if _, _, err := s.CreateKey(bg, a, ledger.Live, "operator", time.Time{}); err != nil {
		t.Fatalf("CreateKey is not capped: %v", err)
	}
	_, _, err = s.CreateKeyCapped(bg, "acct_nope", ledger.Live, "", time.Time{}, limit)
	WantErr(t, err, ledger.ErrNotFound)
}

// testLookupKeyBalance: the key, its account and the account's credits in one step, exactly as
// LookupKey and Balance give them; garbage and revoked keys fail alike.
func testLookupKeyBalance(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "both@example.com").ID
	MustGrant(t, s, a, ledger.Live, 3)
	MustGrant(t, s, a, ledger.Test, 2)
	MustHold(t, s, a, ledger.Live, "r1")
	full, k, err := s.CreateKey(bg, a, ledger.Live, "k", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	gk, ga, gb, err := s.LookupKeyBalance(bg, full)
	if err != nil {
		t.Fatal(err)
	}
	if want := MustBalance(t, s, a); gk.ID != k.ID || ga.ID != a || !reflect.DeepEqual(gb, want) {
		t.Fatalf("LookupKeyBalance: key %s account %s balance %+v; want %s %s %+v", gk.ID, ga.ID, gb, k.ID, a, want)
	}
	if gb.Available != 2 || gb.Balance != 3 || gb.TestAvailable != 2 {
		t.Fatalf("balance %+v, want 3 with 2 available and 2 test credits", gb)
	}
	for _, bad := range []string{"", "tg_live_nope", full + "x"} {
		if _, _, _, err := s.LookupKeyBalance(bg, bad); err != ledger.ErrInvalidKey {
			t.Fatalf("LookupKeyBalance(%q): %v", bad, err)
		}
	}
	if _, err := s.RevokeKey(bg, a, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.LookupKeyBalance(bg, full); err != ledger.ErrInvalidKey {
		t.Fatalf("LookupKeyBalance of a revoked key: %v", err)
	}
}

// testKeyLastUsed: a key's last use is the time of its last hold. A request refused before it
// was charged (no credit, a spent budget, a disabled account) and a mere lookup leave it as it
// was; a repeated hold is not a new use.
func testKeyLastUsed(t *testing.T, eng engine) {
	t0 := time.Date(2030, 3, 4, 5, 6, 7, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a := MustAccount(t, s, "lastused@example.com")
	full, k, err := s.CreateKey(bg, a.ID, ledger.Live, "ci", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	lastUsed := func(want time.Time, after string) {
		t.Helper()
		keys, err := s.ListKeys(bg, a.ID)
		if err != nil || len(keys) != 1 || !keys[0].LastUsed.Equal(want) {
			t.Fatalf("after %s: ListKeys %+v %v, want last use %v", after, keys, err, want)
		}
		got, _, _, err := s.LookupKeyBalance(bg, full)
		if err != nil || !got.LastUsed.Equal(want) {
			t.Fatalf("after %s: LookupKeyBalance's last use %v %v, want %v", after, got.LastUsed, err, want)
		}
	}
	t0 = t0.Add(time.Minute)
	if _, _, err := s.LookupKey(bg, full); err != nil {
		t.Fatal(err)
	}
	lastUsed(time.Time{}, "a lookup")
	// No credit: refused, not a use.
	WantErr(t, HoldOn(s, a.ID, k.ID, "r0"), ledger.ErrInsufficientCredits)
	lastUsed(time.Time{}, "a hold refused for want of credits")

	MustGrant(t, s, a.ID, ledger.Live, 10)
	if _, err := s.UpdateKey(bg, a.ID, k.ID, ledger.KeySettings{Name: "ci", Limits: ledger.KeyLimits{BudgetDay: 1}}); err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(time.Minute)
	held := t0
	if err := HoldOn(s, a.ID, k.ID, "r1"); err != nil {
		t.Fatal(err)
	}
	lastUsed(held, "a hold")
	// The day's budget of 1 is spent: refused, not a use.
	t0 = t0.Add(time.Minute)
	WantBudget(t, HoldOn(s, a.ID, k.ID, "r2"), "day", 1, time.Date(2030, 3, 5, 0, 0, 0, 0, time.UTC))
	lastUsed(held, "a hold refused by the key's budget")
	// A repeated request id changes nothing.
	if err := HoldOn(s, a.ID, k.ID, "r1"); err != nil {
		t.Fatal(err)
	}
	lastUsed(held, "a repeated hold")
	// A disabled account's hold is refused: not a use.
	if _, err := s.SetAccountStatus(bg, a.ID, ledger.StatusDisabled); err != nil {
		t.Fatal(err)
	}
	WantErr(t, HoldOn(s, a.ID, k.ID, "r3"), ledger.ErrAccountDisabled)
	lastUsed(held, "a hold refused on a disabled account")
}
