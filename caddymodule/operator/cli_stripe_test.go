package operator

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
)

// TestCLIStripeWebhook completes a purchase as a newcomer does locally: the built binary runs a
// site with textgen and My Account (Stripe switched on), and `caddy textgen stripe webhook` sends
// the webhook a signed paid session; the credits arrive once, however often it is sent.
func TestCLIStripeWebhook(t *testing.T) {
	const secret = "whsec_cli_test"
	s, url := startStripeServer(t, secret)
	acct := caddyproc.Str(t, s.JSON("account", "create", "--email", "buyer@example.com"), "id")

	sent := s.JSON("stripe", "webhook", "--url", url, "--secret", secret, "--account", acct, "--session", "cs_test_cli_1")
	if caddyproc.Str(t, sent, "reply") != "credited" || caddyproc.Num(t, sent, "credits") != 10 || caddyproc.Num(t, sent, "amount_cents") != 200 {
		t.Fatalf("first delivery: %v", sent)
	}
	if got := caddyproc.Num(t, s.JSON("balance", "--account", acct), "available"); got != 10 {
		t.Fatalf("available after the purchase: %d, want 10", got)
	}
	// Stripe delivers at least once: the same session again credits nothing.
	again := s.JSON("stripe", "webhook", "--url", url, "--secret", secret, "--account", acct, "--session", "cs_test_cli_1")
	if r := caddyproc.Str(t, again, "reply"); r != "duplicate: credited before" {
		t.Fatalf("second delivery: %q", r)
	}
	// The secret from the environment, a package of the seller's own; the table output.
	t.Setenv(webhookSecretEnv, "")
	res := s.Textgen("stripe", "webhook", "--url", url, "--account", acct, "--package", "50", "--credits", "50", "--amount-cents", "900")
	caddyproc.MustFail(t, res, 2, "--secret is required")
	t.Setenv(webhookSecretEnv, secret)
	res = s.Textgen("stripe", "webhook", "--url", url, "--account", acct, "--package", "50", "--credits", "50", "--amount-cents", "900")
	if res.Code != 0 || !strings.Contains(res.Stdout, "package 50: 50 credits for 9.00 EUR") || !strings.Contains(res.Stdout, "The webhook answered 200: credited.") {
		t.Fatalf("with the secret from the environment: %v", res)
	}
	if got := caddyproc.Num(t, s.JSON("balance", "--account", acct), "available"); got != 60 {
		t.Fatalf("available after two purchases: %d, want 60", got)
	}

	// A wrong secret is refused by the webhook (400) and credits nothing; so is an unknown
	// account (200, but nothing credited): both exit 1.
	caddyproc.MustFail(t, s.Textgen("stripe", "webhook", "--url", url, "--secret", "whsec_wrong", "--account", acct, "--json"), 1, "answered 400", "invalid signature")
	caddyproc.MustFail(t, s.Textgen("stripe", "webhook", "--url", url, "--secret", secret, "--account", "acct_nope", "--json"), 1, "nothing was credited", "unknown account")
	if got := caddyproc.Num(t, s.JSON("balance", "--account", acct), "available"); got != 60 {
		t.Fatalf("available after refused deliveries: %d, want 60", got)
	}
}

// startStripeServer runs the built binary with a site of textgen and My Account, buying
// switched on with the webhook secret (Stripe's API itself is never called), and returns it
// with the webhook's URL.
func startStripeServer(t *testing.T, secret string) (*caddyproc.Server, string) {
	t.Helper()
	ledgerDir := filepath.Join(t.TempDir(), "ledger")
	s := caddyproc.Start(t, fmt.Sprintf(`textgen /api/* {
		ledger %[1]s
		ollama http://127.0.0.1:1
	}
	textgen_account {
		ledger %[1]s
		stripe_secret_key sk_test_cli
		stripe_webhook_secret %[2]s
		stripe_api_url http://127.0.0.1:1
	}`, ledgerDir, secret), ledgerDir)
	return s, "http://" + s.HTTP + "/account/stripe/webhook"
}
