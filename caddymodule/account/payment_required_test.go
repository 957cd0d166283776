package account

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// The API's 402 says where to buy and names the packages that are on sale there: My Account's
// own packages when its buying is on, none (ask the operator, naming the account and the command
// that credits it) when it is off, and buy_url's
// address when the handler has one.
func TestPaymentRequiredNamesPackages(t *testing.T) {
	stripeMock := realStripeMock(t)
	t.Setenv("TEXTGEN_TEST_STRIPE_KEY", "sk_test_packages")
	t.Setenv("TEXTGEN_TEST_WEBHOOK_SECRET", testWebhookSecret)
	cases := []struct {
		name, textgen, account, want string
	}{
		{"two packages on sale", "", "stripe_secret_key {env.TEXTGEN_TEST_STRIPE_KEY}\n\t\tstripe_webhook_secret {env.TEXTGEN_TEST_WEBHOOK_SECRET}\n\t\tstripe_api_url " + stripeMock.URL +
			"\n\t\tpackage small 10 200\n\t\tpackage large 100 1500",
			"no credits left; buy a credit package (10 credits = 2.00 EUR, 100 credits = 15.00 EUR) at /account/"},
		{"buying off", "", "", "no credits left; this service does not sell credits online: ask the operator of this service to add credits to account {acct} " +
			"(the operator's command: caddy textgen credits grant --account {acct} --credits <n>)"},
		{"buy_url", "buy_url https://shop.example.com/credits", "", "no credits left; buy credits at https://shop.example.com/credits"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
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
		%s
	}
	textgen_account {
		ledger %s
		%s
	}
	respond "not found" 404
}
`, caddyAdminPort, caddyHTTPPort, caddyHTTPSPort, caddyHTTPPort, dir, tc.textgen, dir, tc.account))
			store, release := openLedger(t, dir)
			defer release()
			ctx := context.Background()
			acct, err := store.CreateAccount(ctx, fmt.Sprintf("broke-%d@example.com", time.Now().UnixNano()))
			if err != nil {
				t.Fatal(err)
			}
			key, _, err := store.CreateKey(ctx, acct.ID, ledger.Live, "k", time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			want := strings.ReplaceAll(tc.want, "{acct}", acct.ID)
			res := generate(t, key)
			var body struct {
				Error struct{ Code, Message string }
			}
			if res.status != http.StatusPaymentRequired || json.Unmarshal([]byte(res.body), &body) != nil ||
				body.Error.Code != "insufficient_credits" || body.Error.Message != want {
				t.Fatalf("%d %s\nwant the message %q", res.status, res.body, want)
			}
		})
	}
}
