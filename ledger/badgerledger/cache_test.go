package badgerledger

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// cached reports whether account id is in the cache.
func cached(s *Badger, id string) bool {
	s.cacheMu.RLock()
	defer s.cacheMu.RUnlock()
	return s.cached[id] != nil
}

// evictAll uses other accounts until acct has left the cache (a cache of one account), failing
// the test if it never does. A pass runs when a load finds the cache full; it is also run here
// after the committer caught up, since an account may go only once its writes are in the
// snapshot, and when every account is cached no load comes.
func evictAll(t *testing.T, s *Badger, acct string, others []string) {
	t.Helper()
	for range 3 {
		for _, o := range others {
			if _, err := s.Balance(bg, o); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.c.barrier(); err != nil {
			t.Fatal(err)
		}
		s.evict()
		if !cached(s, acct) {
			return
		}
	}
	t.Fatalf("account %s is still cached: %+v", acct, s.CacheStats())
}

// TestCacheKeepsChanges: what a key's account had changed holds at the next request after the
// account left the cache and was read again: a revocation, a roll's end (the replaced secret
// stops when its grace ends, on the store's clock), a budget, a balance, an open hold (which
// keeps its account cached until resolved) and a last use not yet written (likewise).
func TestCacheKeepsChanges(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	o := quiet
	o.CacheAccounts = 1
	o.Now = func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	s := openDir(t, t.TempDir(), o)
	a := ledgertest.MustAccount(t, s, "cache-a@example.com").ID
	ledgertest.MustGrant(t, s, a, ledger.Live, 100)
	var others []string
	for i := range 3 {
		others = append(others, ledgertest.MustAccount(t, s, fmt.Sprintf("cache-o%d@example.com", i)).ID)
	}
	revoked, rk, err := s.CreateKey(bg, a, ledger.Live, "revoked", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	rolled, ok, err := s.CreateKey(bg, a, ledger.Live, "rolled", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	budget, bk, err := s.CreateKey(bg, a, ledger.Live, "budget", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateKey(bg, a, bk.ID, ledger.KeySettings{Name: "budget", Limits: ledger.KeyLimits{BudgetTotal: 2}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeKey(bg, a, rk.ID); err != nil {
		t.Fatal(err)
	}
	newSecret, _, err := s.RollKey(bg, a, ok.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		rid := fmt.Sprintf("req_budget%d", i)
		if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: rid, KeyID: bk.ID, Tool: "summarize"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Settle(bg, a, rid); err != nil {
			t.Fatal(err)
		}
	}
	// A hold with a key without a budget notes its use in memory alone: the account stays until
	// that is written. (A budget key's use is written with its count.)
	if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "req_used", KeyID: ok.ID, Tool: "summarize"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Void(bg, a, "req_used", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Balance(bg, others[0]); err != nil {
		t.Fatal(err)
	}
	if !cached(s, a) {
		t.Fatal("an account with a key's last use not yet written left the cache")
	}
	if err := s.flushLastUsed(true); err != nil {
		t.Fatal(err)
	}
	evictAll(t, s, a, others)

	if _, _, err := s.LookupKey(bg, revoked); !errors.Is(err, ledger.ErrInvalidKey) {
		t.Fatalf("a revoked key read again from disk: %v, want ErrInvalidKey", err)
	}
	evictAll(t, s, a, others)
	if _, _, err := s.LookupKey(bg, rolled); err != nil {
		t.Fatalf("a rolled key's previous secret within its grace: %v", err)
	}
	if _, _, err := s.LookupKey(bg, newSecret); err != nil {
		t.Fatalf("a rolled key's new secret: %v", err)
	}
	evictAll(t, s, a, others)
	clock.Add(int64(time.Hour))
	if _, _, err := s.LookupKey(bg, rolled); !errors.Is(err, ledger.ErrInvalidKey) {
		t.Fatalf("a rolled key's previous secret at its grace's end, read again from disk: %v, want ErrInvalidKey", err)
	}
	evictAll(t, s, a, others)
	var over *ledger.KeyBudgetError
	if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "req_budget2", KeyID: bk.ID, Tool: "summarize"}); !errors.As(err, &over) {
		t.Fatalf("a key whose budget is spent, read again from disk: %v, want a budget error", err)
	}
	if k, _, err := s.LookupKey(bg, budget); err != nil || k.LastUsed.IsZero() {
		t.Fatalf("the budget key read again: %+v, %v; want its last use", k, err)
	}
	if k, _, err := s.LookupKey(bg, newSecret); err != nil || k.LastUsed.IsZero() {
		t.Fatalf("the rolled key read again: %+v, %v; want its last use, flushed", k, err)
	}
	if b, err := s.Balance(bg, a); err != nil || b.Balance != 98 {
		t.Fatalf("balance read again: %+v, %v; want 98", b, err)
	}

	// An open hold keeps its account; once settled it may go, and the settle holds.
	if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "req_open"}); err != nil {
		t.Fatal(err)
	}
	for _, o := range others {
		if _, err := s.Balance(bg, o); err != nil {
			t.Fatal(err)
		}
	}
	if !cached(s, a) {
		t.Fatal("an account with an open hold left the cache")
	}
	if _, err := s.Settle(bg, a, "req_open"); err != nil {
		t.Fatal(err)
	}
	evictAll(t, s, a, others)
	if r, err := s.Settle(bg, a, "req_open"); err != nil || !r.Repeated || r.Available != 97 {
		t.Fatalf("the settle repeated after the account was read again: %+v, %v", r, err)
	}
	if rep, err := s.Verify(bg); err != nil || !rep.OK {
		t.Fatalf("verify: %v %+v", err, rep.Problems)
	}
}
