package account

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/pgledger"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestTwoInstancesOnPostgres: My Account served by two instances that share one PostgreSQL
// ledger. A customer signs up on one and is logged in on the other (sessions and their CSRF
// tokens live in the database); a key made on one is listed by the other; a paid Checkout
// Session delivered to both at once is credited once.
func TestTwoInstancesOnPostgres(t *testing.T) {
	open := postgresOpener(t, pgtest.NewDatabase(t))
	a := newTestEnvOn(t, open(), withStripe("http://127.0.0.1:1", testWebhookSecret))
	b := newTestEnvOn(t, open(), withStripe("http://127.0.0.1:1", testWebhookSecret))

	onA := a.browser()
	acct := onA.signup("shared@example.com")
	// The same browser (its cookie) on the other instance.
	onB := &browser{t: t, e: b, c: onA.c, jar: onA.jar, base: b.srv.URL}
	r := onB.get("/account/")
	expectStatus(t, "dashboard on the other instance", r, 200)
	mustContain(t, "dashboard on the other instance", r.body, "shared@example.com")
	// A form of the other instance, with the CSRF token of the shared session.
	r = onB.post("/account/keys", "csrf_token", onB.csrf("/account/keys"), "name", "made-on-b", "mode", "live")
	expectStatus(t, "key made on the other instance", r, 201)
	mustContain(t, "the key list on the first instance", onA.get("/account/keys").body, "made-on-b")

	// One paid session, delivered to both instances at once, several times.
	payload := checkoutEvent("checkout.session.completed", "cs_test_shared", acct.ID, "paid", "10", 200)
	var wg sync.WaitGroup
	var mu sync.Mutex
	replies := map[string]int{}
	for i := range 8 {
		env := a
		if i%2 == 1 {
			env = b
		}
		wg.Go(func() {
			status, body := deliver(t, env.srv.URL+"/account/stripe/webhook", payload, testWebhookSecret, time.Now())
			mu.Lock()
			replies[fmt.Sprintf("%d %s", status, strings.TrimSpace(body))]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if got := purchasesOf(t, a.store, acct.ID); fmt.Sprint(got) != "map[cs_test_shared:1]" {
		t.Fatalf("purchases %v after 8 deliveries to two instances (replies %v), want one", got, replies)
	}
	bal, err := b.store.Balance(bg, acct.ID)
	if err != nil || bal.Balance != 10 {
		t.Fatalf("balance %+v %v, want 10", bal, err)
	}
}

// postgresOpener opens instances of one PostgreSQL ledger at url, each closed when the test ends.
func postgresOpener(t *testing.T, url string) func() ledger.Store {
	return func() ledger.Store {
		s, err := pgledger.OpenPostgres(bg, url, pgledger.PostgresOptions{SweepInterval: -1, LastUsedFlushInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}
