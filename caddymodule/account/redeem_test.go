package account

import (
	"net/http"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
)

// TestRedeemCodeInMyAccount: the buy page's form redeems a code into the account's live credits
// once, with a message; codes that cannot be redeemed get one message and are throttled; the
// form needs its CSRF token.
func TestRedeemCodeInMyAccount(t *testing.T) {
	e := newTestEnv(t) // no Stripe: the form is there all the same
	b := e.browser()
	acct := b.signup("redeemer@example.com")
	code, _, err := e.store.CreateCode(bg, ledger.NewCode{Credits: 30, MaxUses: 5})
	if err != nil {
		t.Fatal(err)
	}
	page := b.get("/account/buy")
	expectStatus(t, "the buy page", page, http.StatusOK)
	mustContain(t, "the buy page", page.body, "Redeem a code", `action="/account/redeem"`)

	for _, tok := range []string{"", "wrong-token"} {
		f := []string{"code", code}
		if tok != "" {
			f = append(f, "csrf_token", tok)
		}
		expectStatus(t, "a redeem without its CSRF token", b.post("/account/redeem", f...), http.StatusForbidden)
	}
	if bal, _ := e.store.Balance(bg, acct.ID); bal.Balance != 0 {
		t.Fatalf("a forged form credited: %+v", bal)
	}

	csrf := b.csrf("/account/buy")
	r := b.post("/account/redeem", "csrf_token", csrf, "code", strings.ToLower(code))
	if r.status != http.StatusSeeOther || r.location() != "/account/buy?redeemed=30" {
		t.Fatalf("redeem: %d %s\n%s", r.status, r.location(), r.body)
	}
	mustContain(t, "after the redemption", b.get(r.location()).body, "Code redeemed: 30 live credits")
	if bal, _ := e.store.Balance(bg, acct.ID); bal.Balance != 30 || bal.TestBalance != 50 {
		t.Fatalf("balance after the redemption: %+v", bal)
	}
	r = b.post("/account/redeem", "csrf_token", csrf, "code", code)
	expectStatus(t, "a second redemption", r, http.StatusConflict)
	mustContain(t, "a second redemption", r.body, "already redeemed this code")

	// Ten codes that cannot be redeemed, all alike; the eleventh is throttled, even a right one.
	disabled, dc, _ := e.store.CreateCode(bg, ledger.NewCode{Credits: 1})
	if _, err := e.store.DisableCode(bg, dc.ID); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		bad := ledger.MakeCode()
		switch i {
		case 0:
			bad = "nonsense"
		case 1:
			bad = disabled
		}
		r := b.post("/account/redeem", "csrf_token", csrf, "code", bad)
		expectStatus(t, "a wrong code", r, http.StatusBadRequest)
		mustContain(t, "a wrong code", r.body, "This code cannot be redeemed.")
	}
	fresh, _, _ := e.store.CreateCode(bg, ledger.NewCode{Credits: 2})
	r = b.post("/account/redeem", "csrf_token", csrf, "code", fresh)
	expectStatus(t, "the eleventh attempt", r, http.StatusTooManyRequests)
	mustContain(t, "the eleventh attempt", r.body, "Too many codes")
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	if bal, _ := e.store.Balance(bg, acct.ID); bal.Balance != 30 {
		t.Fatalf("balance after the refusals: %+v", bal)
	}
}
