package account

import (
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"os"
	"testing"
)

// My Account says what a request costs: 1 credit, and the tools the textgen handler of the same
// ledger prices otherwise (a tool block's credits), on the dashboard and the page that sells
// credits; and how long each package's credits last.
func TestMyAccountStatesToolPrices(t *testing.T) {
	stripeMock := realStripeMock(t)
	t.Setenv("TEXTGEN_TEST_STRIPE_KEY", "sk_test_prices")
	t.Setenv("TEXTGEN_TEST_WEBHOOK_SECRET", testWebhookSecret)
	dir, err := os.MkdirTemp(testRoot, "ledger-")
	if err != nil {
		t.Fatal(err)
	}
	loadCaddyfile(t, fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 5s
	skip_install_trust
}
http://127.0.0.1:%d {
	textgen /api/* {
		ledger %s
		ollama http://127.0.0.1:1
		tool bewerbung-workflow {
			credits 3
		}
		tool cover-letter {
			credits 2
		}
		tool summarizer {
			credits 1
		}
	}
	textgen_account {
		ledger %s
		stripe_secret_key {env.TEXTGEN_TEST_STRIPE_KEY}
		stripe_webhook_secret {env.TEXTGEN_TEST_WEBHOOK_SECRET}
		stripe_api_url %s
		package small 10 200
		package year 100 1500 expires 365d
	}
	respond "not found" 404
}
`, caddyAdminPort, caddyHTTPPort, caddyHTTPSPort, caddyHTTPPort, dir, dir, stripeMock.URL))
	store, release := openLedger(t, dir)
	defer release()
	jar, _ := cookiejar.New(nil)
	b := &browser{t: t, e: &testEnv{t: t, store: store}, jar: jar, base: caddyBase, c: &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	b.signup(uniqueEmail("prices"))
	want := []string{`bewerbung-workflow (3 credits)</span>, <span class="tool-price">cover-letter (2 credits)`}
	dash := b.get("/account/")
	expectStatus(t, "dashboard", dash, http.StatusOK)
	mustContain(t, "dashboard", dash.body, append(want, "1 credit per request with a live key")...)
	mustNotContain(t, "dashboard", dash.body, "summarizer (1 credits)")
	buy := b.get("/account/buy")
	expectStatus(t, "buy page", buy, http.StatusOK)
	mustContain(t, "buy page", buy.body, append(want, "One credit pays for one request, except the tools that cost more",
		"they never expire", "they expire 365 days after the purchase", "Credits that expire are spent first")...)
	mustNotContain(t, "buy page", buy.body, "Credits do not expire.")
}
