package operator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
)

// TestCLIAccountDisputed: the built caddy with a Badger ledger on disk; a purchase (the local
// test webhook) and Stripe's signed charge.dispute.created for it: `caddy textgen account get`
// marks the account DISPUTED and lists the dispute with its reason and amount, and its --json
// has "disputed": true and the dispute; an account without one is not marked.
func TestCLIAccountDisputed(t *testing.T) {
	const secret = "whsec_cli_disputed"
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
	url := "http://" + s.HTTP + "/account/stripe/webhook"
	acct := caddyproc.Str(t, s.JSON("account", "create", "--email", "disputed-cli@example.com"), "id")
	clean := caddyproc.Str(t, s.JSON("account", "create", "--email", "clean-cli@example.com"), "id")
	s.JSON("stripe", "webhook", "--url", url, "--secret", secret, "--account", acct, "--session", "cs_test_disputed")

	payload, _ := json.Marshal(map[string]any{"id": "evt_dispute_cli", "object": "event", "type": "charge.dispute.created",
		"created": time.Now().Unix(), "api_version": "2025-01-27.acacia", "data": map[string]any{"object": map[string]any{
			"id": "du_test_cli", "object": "dispute", "amount": 200, "currency": "eur", "status": "needs_response",
			"reason": "product_not_received", "payment_intent": "pi_local_test_disputed", "charge": "ch_local"}}})
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret})
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(string(payload)))
	req.Header.Set("Stripe-Signature", sp.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the dispute's event: %d", resp.StatusCode)
	}

	out := s.Textgen("account", "get", "--account", acct)
	if out.Code != 0 {
		t.Fatalf("account get: %v", out)
	}
	for _, want := range []string{"DISPUTED", "du_test_cli", "product_not_received", "2.00 EUR", "open", "cs_test_disputed"} {
		if !strings.Contains(out.Stdout, want) {
			t.Fatalf("account get does not show %q:\n%s", want, out.Stdout)
		}
	}
	j := s.JSON("account", "get", "--account", acct)
	ds := caddyproc.List(t, j, "disputes")
	if j["disputed"] != true || len(ds) != 1 || ds[0]["id"] != "du_test_cli" || ds[0]["reason"] != "product_not_received" || caddyproc.Num(t, ds[0], "amount_cents") != 200 {
		t.Fatalf("account get --json: %v", j)
	}
	if out := s.Textgen("account", "get", "--account", clean); out.Code != 0 || strings.Contains(out.Stdout, "DISPUTED") || strings.Contains(out.Stdout, "Refunds and disputes") {
		t.Fatalf("account get of an account without disputes: %v", out)
	}
}
