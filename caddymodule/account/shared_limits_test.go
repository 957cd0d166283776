package account

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/ratelimit"
	"github.com/caddy-textgen/textgen/caddymodule/internal/redistest"
)

// withLimits keeps the throttles in the Redis store s under the ledger name.
func withLimits(s *ratelimit.Shared, name string) envOpt {
	return func(c *appConfig) { c.limits, c.limitsName = s, name }
}

// TestThrottlesSharedAcrossInstances: two account areas on one ledger and one real Redis (two
// instances): the log-in throttle per account and address and the sign-up throttle per address
// count the attempts sent to both.
func TestThrottlesSharedAcrossInstances(t *testing.T) {
	srv := redistest.New(t)
	open := func() *ratelimit.Shared {
		s, err := ratelimit.OpenShared(srv.URL(0), ratelimit.SharedOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	e1 := newTestEnv(t, withLimits(open(), "ledger-1"))
	e2 := newTestEnvOn(t, e1.store, withLimits(open(), "ledger-1"))
	e1.browser().signup("victim@example.com")
	b1, b2 := e1.browser(), e2.browser()

	// Five wrong passwords, three through one instance and two through the other; the sixth
	// attempt, on either, is refused before its password is checked.
	for i := range 5 {
		b := []*browser{b1, b2}[i%2]
		expectStatus(t, fmt.Sprint("failed attempt ", i+1), b.login("victim@example.com", "guess"), http.StatusUnauthorized)
	}
	expectStatus(t, "sixth attempt through instance 1", b1.login("victim@example.com", testPassword), http.StatusTooManyRequests)
	expectStatus(t, "sixth attempt through instance 2", b2.login("victim@example.com", testPassword), http.StatusTooManyRequests)

	// Ten sign-ups an hour from one address (one was the victim's), over both instances.
	for i := range 9 {
		b := []*testEnv{e1, e2}[i%2].browser() // a new visitor from the same address
		r := b.post("/account/signup", "csrf_token", b.csrf("/account/signup"), "email", fmt.Sprintf("new%d@example.com", i), "password", testPassword)
		expectStatus(t, fmt.Sprint("sign-up ", i+2), r, http.StatusSeeOther)
	}
	b3 := e2.browser()
	r := b3.post("/account/signup", "csrf_token", b3.csrf("/account/signup"), "email", "eleventh@example.com", "password", testPassword)
	expectStatus(t, "eleventh sign-up from one address over two instances", r, http.StatusTooManyRequests)
}
