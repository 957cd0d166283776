package caddymodule

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
)

// TestGenerateInDebt: buy 10, spend 3, the purchase is refunded in full: the account owes 3
// credits. Generate answers 402 naming the debt (and X-Credits-Remaining 0, as documented),
// the balance shows -3 with nothing available, and it costs nothing; a new purchase of 10 pays
// the debt and generating works again, 7 left. Verify is clean all along.
func TestGenerateInDebt(t *testing.T) {
	ollama := modelServer(t)
	e := newEnv(t, envOptions{ollama: ollama})
	ctx := context.Background()
	acct, key := e.account(0)
	buy := func(session, pi string) {
		t.Helper()
		if _, err := e.store.Grant(ctx, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindPurchase,
			Credits: 10, Reference: session, AmountCents: 200, Currency: "EUR"}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.store.RecordPayment(ctx, ledger.Payment{ID: pi, Reference: session, AccountID: acct.ID,
			Credits: 10, AmountCents: 200, Currency: "eur", Status: ledger.PaymentPaid}); err != nil {
			t.Fatal(err)
		}
	}
	generate := func() *http.Response {
		t.Helper()
		resp, err := e.post(ctx, key, genBody("summarizer", "x", "en", ""))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("generate: %d", resp.StatusCode)
		}
		return resp
	}
	buy("cs_debt_1", "pi_debt_1")
	for range 3 {
		generate()
	}
	if _, err := e.store.Reverse(ctx, ledger.ReversalRequest{ID: "re_debt", Kind: ledger.ReversalRefund, Payment: "pi_debt_1",
		AmountCents: 200, Currency: "eur", Status: ledger.RefundApplied}); err != nil {
		t.Fatal(err)
	}
	conf := newConformance(t, e.client)
	req, _ := http.NewRequest(http.MethodPost, baseURL+"/api/v1/generate", strings.NewReader(genBody("summarizer", "x", "en", "")))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	conf.check(req, resp)
	b := decodeErr(t, resp)
	if resp.StatusCode != 402 || b.Error.Code != "insufficient_credits" || !strings.Contains(b.Error.Message, "owes 3 credits") ||
		resp.Header.Get("X-Credits-Remaining") != "0" {
		t.Fatalf("generate in debt: %d %+v %v", resp.StatusCode, b.Error, resp.Header)
	}
	breq, _ := http.NewRequest(http.MethodGet, baseURL+"/api/v1/balance", nil)
	breq.Header.Set("X-API-Key", key)
	bresp, err := e.client.Do(breq)
	if err != nil {
		t.Fatal(err)
	}
	body := string(conf.check(breq, bresp))
	if bresp.StatusCode != 200 || !strings.Contains(body, `"balance":-3`) || !strings.Contains(body, `"available":0`) ||
		bresp.Header.Get("X-Credits-Remaining") != "0" {
		t.Fatalf("balance in debt: %d %s %v", bresp.StatusCode, body, bresp.Header)
	}
	if bal := e.balance(acct.ID); bal.Balance != -3 || bal.Available != -3 {
		t.Fatalf("the 402 changed the ledger: %+v", bal)
	}
	e.verify()
	buy("cs_debt_2", "pi_debt_2")
	if bal := e.balance(acct.ID); bal.Balance != 7 || bal.Available != 7 {
		t.Fatalf("after buying again: %+v, want 7", bal)
	}
	if resp := generate(); resp.Header.Get("X-Credits-Remaining") != "6" {
		t.Fatalf("generate after paying the debt: %v", resp.Header)
	}
	e.verify()
}
