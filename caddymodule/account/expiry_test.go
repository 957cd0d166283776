package account

import (
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// withPackages replaces the packages on sale.
func withPackages(ps ...Package) envOpt {
	return func(c *appConfig) { c.packages = ps }
}

// TestPackageExpires: a package with expires gives credits that expire that long after the
// payment's webhook (also when the session's metadata carries the offer), and My Account's
// dashboard says how many expire when.
func TestPackageExpires(t *testing.T) {
	e := newTestEnv(t, withStripe("http://127.0.0.1:1", testWebhookSecret),
		withPackages(Package{ID: "10", Credits: 10, PriceCents: 200}, Package{ID: "year", Credits: 100, PriceCents: 1500, Expires: caddy.Duration(365 * 24 * time.Hour)}))
	b := e.browser()
	acct := b.signup("expiry@example.com")
	before := time.Now()
	hook(t, e, checkoutEvent("checkout.session.completed", "cs_test_year", acct.ID, "paid", "year", 1500), 200, "credited")
	hook(t, e, checkoutEventIn("checkout.session.completed", "cs_test_meta", acct.ID, "paid", "year", 1500, "eur",
		map[string]string{"credits": "100", "price_cents": "1500", "expires_seconds": "86400"}), 200, "credited")
	buyThrough(t, e, acct.ID, "cs_test_never")
	bal, err := e.store.Balance(bg, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	if bal.Balance != 210 || len(bal.Expiring) != 2 {
		t.Fatalf("balance after the purchases: %+v", bal)
	}
	day, year := bal.Expiring[0], bal.Expiring[1]
	if day.Credits != 100 || day.Expires.Before(before.Add(24*time.Hour-time.Minute)) || day.Expires.After(time.Now().Add(24*time.Hour)) {
		t.Errorf("credits of the offer in the session's metadata: %+v", day)
	}
	if year.Credits != 100 || year.Expires.Before(before.Add(365*24*time.Hour-time.Minute)) || year.Expires.After(time.Now().Add(365*24*time.Hour)) {
		t.Errorf("credits of the package that expires in a year: %+v", year)
	}
	r := b.get("/account/")
	expectStatus(t, "dashboard", r, 200)
	for _, x := range bal.Expiring {
		want := x.Expires.UTC().Format("2 January 2006, 15:04 UTC")
		if !strings.Contains(r.body, "100 credits expire on "+want) {
			t.Errorf("the dashboard does not say that 100 credits expire on %s", want)
		}
	}
}
