package binarytest

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestTwoInstancesKeyBudget: two Caddy instances on one PostgreSQL ledger, 1,000 generate
// requests racing over both on a live key with a daily budget of 37 (set with the CLI): exactly
// 37 are answered 200 and charged, the rest 402 key_budget_exhausted, and the account's
// figures are right. Then the key is rolled (CLI) with a grace period: both secrets are the
// same key on both instances (its spent budget carried over), a second roll stops the oldest
// secret at once on both, and the one in its grace stops on both once the grace has passed.
func TestTwoInstancesKeyBudget(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "tok "})
	a := caddyproc.Start(t, pgSite(url, fs.URL, ""), url)
	b := caddyproc.Start(t, pgSite(url, fs.URL, ""), url)
	acct := caddyproc.Str(t, a.JSON("account", "create", "--email", "budget@example.com"), "id")
	created := b.JSON("key", "create", "--account", acct)
	key, kid := caddyproc.Str(t, created, "key"), caddyproc.Str(t, created, "id")
	a.JSON("credits", "grant", "--account", acct, "--credits", "1000", "--reference", "budget")
	lim := a.JSON("key", "limits", "--account", acct, "--key-id", kid, "--budget-day", "37")
	if caddyproc.Num(t, lim, "budget_day") != 37 {
		t.Fatalf("limits: %v", lim)
	}

	const total, workers = 1000, 32
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	var next, ok, spent, other atomic.Int64
	var firstOther atomic.Value
	body := genBody("summarizer", "x", "en", "")
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > total {
					return
				}
				addr := a.HTTP
				if (i+int64(w))%2 == 0 {
					addr = b.HTTP
				}
				status, text, h, err := postTo(client, addr, key, body)
				switch {
				case err == nil && status == http.StatusOK && text == "tok tok tok ":
					ok.Add(1)
				case err == nil && status == http.StatusPaymentRequired && strings.Contains(text, `"key_budget_exhausted"`) &&
					h.Get("X-Credits-Used") == "0" && !strings.Contains(text, key[8:]):
					spent.Add(1)
				default:
					other.Add(1)
					firstOther.CompareAndSwap(nil, fmt.Sprintf("%d %q %v", status, text, err))
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != 37 || spent.Load() != total-37 || other.Load() != 0 {
		t.Fatalf("%d requests over two instances on a key with a budget of 37: %d x 200, %d x 402 key_budget_exhausted, %d other (first: %v)",
			total, ok.Load(), spent.Load(), other.Load(), firstOther.Load())
	}
	bal := b.JSON("balance", "--account", acct)
	if v, av := caddyproc.Num(t, bal, "balance"), caddyproc.Num(t, bal, "available"); v != 963 || av != 963 {
		t.Fatalf("balance %d, available %d after 37 charged requests of 1000 credits", v, av)
	}

	// A roll with an hour's grace: both secrets are the key, with its spent budget, everywhere.
	roll := func(s *caddyproc.Server, grace string) string {
		t.Helper()
		r := s.JSON("key", "roll", "--account", acct, "--key-id", kid, "--grace", grace)
		if caddyproc.Str(t, r, "id") != kid {
			t.Fatalf("roll: %v", r)
		}
		return caddyproc.Str(t, r, "key")
	}
	want := func(k string, status int, code string) {
		t.Helper()
		for _, s := range []*caddyproc.Server{a, b} {
			got, text, _, err := postTo(client, s.HTTP, k, body)
			if err != nil || got != status || !strings.Contains(text, code) {
				t.Fatalf("key …%s on %s: %d %q %v, want %d %s (keys: %v)", k[len(k)-4:], s.HTTP, got, text, err, status, code,
					a.JSON("key", "list", "--account", acct))
			}
		}
	}
	first := roll(a, "1h")
	want(key, http.StatusPaymentRequired, "key_budget_exhausted")
	want(first, http.StatusPaymentRequired, "key_budget_exhausted")
	a.JSON("key", "limits", "--account", acct, "--key-id", kid, "--budget-day", "0")
	want(key, http.StatusOK, "tok")
	want(first, http.StatusOK, "tok")
	// A second roll while the first's grace runs: the oldest secret stops at once on both; the
	// one it replaced works for its own grace, then stops on both.
	second := roll(b, "1s")
	want(key, http.StatusUnauthorized, "invalid_api_key")
	want(second, http.StatusOK, "tok")
	waitCount(t, "the end of the grace period", func() bool {
		status, _, _, _ := postTo(client, a.HTTP, first, body)
		return status == http.StatusUnauthorized
	})
	want(first, http.StatusUnauthorized, "invalid_api_key")
	want(second, http.StatusOK, "tok")
	for _, s := range []*caddyproc.Server{a, b} {
		if v := s.JSON("ledger", "verify"); !caddyproc.Bool(t, v, "ok") {
			t.Fatalf("verify: %v", v)
		}
	}
}
