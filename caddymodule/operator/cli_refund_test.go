package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/caddy-textgen/textgen/caddymodule/account/stripemocktest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/internal/tier"
)

// TestCLIRefund: `payments refund` refunds through Stripe's API (the real stripe-mock, which
// checks the request against Stripe's specification) and the ledger takes the credits off by the
// refund's id; the refund event Stripe sends for it afterwards takes nothing more. `payments list`
// shows it; a refund of more than is left, or of no purchase, is refused before Stripe is asked.
func TestCLIRefund(t *testing.T) {
	tier.Full(t, "stripe-mock and the caddy binary")
	const secret = "whsec_cli_refund"
	sm, err := stripemocktest.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sm.Stop() })
	ledgerDir := filepath.Join(t.TempDir(), "ledger")
	s := caddyproc.Start(t, fmt.Sprintf(`textgen /api/* {
		ledger %[1]s
		ollama http://127.0.0.1:1
	}
	textgen_account {
		ledger %[1]s
		stripe_secret_key sk_test_cli
		stripe_webhook_secret %[2]s
		stripe_api_url %[3]s
	}`, ledgerDir, secret, sm.URL), ledgerDir)
	url := "http://" + s.HTTP + "/account/stripe/webhook"
	acct := caddyproc.Str(t, s.JSON("account", "create", "--email", "refunded@example.com", "--test-credits", "0"), "id")
	s.JSON("stripe", "webhook", "--url", url, "--secret", secret, "--account", acct, "--session", "cs_test_refund")

	res := s.JSON("payments", "refund", "--reference", "cs_test_refund", "--amount", "100", "--reason", "requested_by_customer")
	rev, _ := res["reversal"].(map[string]any)
	reID, _ := rev["id"].(string)
	if !strings.HasPrefix(reID, "re_") || rev["status"] != "applied" || caddyproc.Num(t, rev, "credits") != 5 ||
		caddyproc.Num(t, rev, "amount_cents") != 100 || res["repeated"] == true {
		t.Fatalf("payments refund: %v", res)
	}
	balance := func() int64 { return caddyproc.Num(t, s.JSON("balance", "--account", acct), "balance") }
	if b := balance(); b != 5 {
		t.Fatalf("balance after the refund: %d, want 5", b)
	}

	// Stripe's event for the same refund: applied before, nothing more taken.
	payload, _ := json.Marshal(map[string]any{"id": "evt_refund_cli", "object": "event", "type": "refund.created",
		"created": time.Now().Unix(), "api_version": "2025-01-27.acacia", "data": map[string]any{"object": map[string]any{
			"id": reID, "object": "refund", "amount": 100, "currency": "eur", "status": "succeeded",
			"payment_intent": "pi_local_test_refund", "charge": "ch_local"}}})
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret})
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(string(payload)))
	req.Header.Set("Stripe-Signature", sp.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var reply map[string]string
	json.NewDecoder(resp.Body).Decode(&reply)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(reply["status"], "duplicate") {
		t.Fatalf("the refund's own event: %d %v", resp.StatusCode, reply)
	}
	if b := balance(); b != 5 {
		t.Fatalf("balance after the refund and its event: %d, want 5", b)
	}

	// More than is left; no such purchase; a reason Stripe does not know.
	caddyproc.MustFail(t, s.Textgen("payments", "refund", "--reference", "cs_test_refund", "--amount", "101"), 1, "100 of 200 cents")
	caddyproc.MustFail(t, s.Textgen("payments", "refund", "--reference", "cs_test_nothing"), 1, "no paid purchase")
	caddyproc.MustFail(t, s.Textgen("payments", "refund", "--reference", "cs_test_refund", "--reason", "because"), 1, "reason")
	if b := balance(); b != 5 {
		t.Fatalf("balance after refused refunds: %d, want 5", b)
	}

	rs := caddyproc.List(t, s.JSON("payments", "list"), "reversals")
	if len(rs) != 1 || rs[0]["id"] != reID || rs[0]["kind"] != "refund" || rs[0]["reference"] != "cs_test_refund" {
		t.Fatalf("payments list reversals: %v", rs)
	}
	if out := s.Textgen("payments", "list"); out.Code != 0 || !strings.Contains(out.Stdout, "Refunds and disputes") || !strings.Contains(out.Stdout, reID) {
		t.Fatalf("payments list table: %v", out)
	}
	// The rest, by default all that is left.
	res = s.JSON("payments", "refund", "--reference", "cs_test_refund")
	if rev, _ := res["reversal"].(map[string]any); caddyproc.Num(t, rev, "amount_cents") != 100 || caddyproc.Num(t, rev, "credits") != 5 {
		t.Fatalf("refund of the rest: %v", res)
	}
	if b := balance(); b != 0 {
		t.Fatalf("balance after refunding all: %d", b)
	}
	if v := s.JSON("ledger", "verify"); v["ok"] != true {
		t.Fatalf("verify: %v", v)
	}
}
