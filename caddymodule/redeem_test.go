package caddymodule

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// redeemPost redeems code with key over HTTP.
func (e *env) redeemPost(key, code string) *http.Response {
	e.t.Helper()
	req := apiRequest("POST", redeemPath, key, `{"code":"`+code+`"}`)
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

// TestRedeemCode: a code credits once per account, up to its uses; unknown, disabled, expired
// and used-up codes get the same answer, each counted as a failed authentication of the address,
// so guessing stops at auth_failure_limit; nothing refused credits anything.
func TestRedeemCode(t *testing.T) {
	fs := fastBackend(t)
	e := newEnv(t, envOptions{ollama: fs.URL, limits: "auth_failure_limit 5/1h"})
	ctx := context.Background()
	code, c, err := e.store.CreateCode(ctx, ledger.NewCode{Credits: 12, MaxUses: 2})
	if err != nil {
		t.Fatal(err)
	}
	a, keyA := e.account(3)
	b, keyB := e.account(0)
	cAcct, keyC := e.account(0)

	// As the customer types it: lower case, spaces.
	resp := e.redeemPost(keyA, strings.ToLower(strings.ReplaceAll(code, "-", " ")))
	var doc redeemDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != 200 {
		t.Fatalf("redeem: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	if doc.Credits != 12 || doc.Balance != 15 || doc.Available != 15 || doc.CodeID != c.ID ||
		resp.Header.Get("X-Credits-Remaining") != "15" || resp.Header.Get("X-Credits-Used") != "0" {
		t.Fatalf("redeem answer %+v %v", doc, resp.Header)
	}
	if r := e.redeemPost(keyA, code); r.StatusCode != http.StatusConflict || decodeErr(t, r).Error.Code != "code_already_redeemed" {
		t.Fatalf("second redemption by one account: %d", r.StatusCode)
	}
	if r := e.redeemPost(keyB, code); r.StatusCode != 200 {
		t.Fatalf("second account: %d", r.StatusCode)
	}

	// Used up, disabled, expired and unknown: one answer (status, code and message).
	disabled, dc, _ := e.store.CreateCode(ctx, ledger.NewCode{Credits: 1, MaxUses: 5})
	if _, err := e.store.DisableCode(ctx, dc.ID); err != nil {
		t.Fatal(err)
	}
	// The ledger's clock is the wall clock here: the code expires a moment after it is made.
	expires := time.Now().Add(50 * time.Millisecond)
	expiring, _, err := e.store.CreateCode(ctx, ledger.NewCode{Credits: 1, MaxUses: 5, Expires: expires})
	if err != nil {
		t.Fatal(err)
	}
	for !time.Now().After(expires) {
		time.Sleep(10 * time.Millisecond)
	}
	var first string
	for _, bad := range []string{code, disabled, expiring, ledger.MakeCode(), "TG-NOT-A-CODE"} {
		r := e.redeemPost(keyC, bad)
		body := decodeErr(t, r)
		got := r.Status + " " + body.Error.Code + " " + body.Error.Message + " " + body.Error.Param
		if first == "" {
			first = got
		}
		if got != first || r.StatusCode != 400 || body.Error.Code != "code_not_redeemable" {
			t.Errorf("redeeming %q: %s; want the same answer for every code that cannot be redeemed (%s)", bad, got, first)
		}
		if r.Header.Get("X-Credits-Remaining") != "0" {
			t.Errorf("X-Credits-Remaining %q", r.Header.Get("X-Credits-Remaining"))
		}
	}
	// Five failures: the address is locked out, even for a right code and a valid key.
	r := e.redeemPost(keyC, disabled)
	if r.StatusCode != http.StatusTooManyRequests || decodeErr(t, r).Error.Code != "rate_limited" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("sixth wrong code: %d, want 429", r.StatusCode)
	}
	fresh, _, _ := e.store.CreateCode(ctx, ledger.NewCode{Credits: 1})
	if r := e.redeemPost(keyC, fresh); r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a right code from a locked-out address: %d, want 429", r.StatusCode)
	}
	for acct, want := range map[string]int64{a.ID: 15, b.ID: 12, cAcct.ID: 0} {
		if bal := e.balance(acct); bal.Balance != want {
			t.Errorf("%s: balance %d, want %d", acct, bal.Balance, want)
		}
	}
	if got, _ := e.store.GetCode(ctx, c.ID); got.Uses != 2 {
		t.Errorf("uses %d, want 2", got.Uses)
	}
	e.verify()
}

// TestRedeemRefusals: every bad request is a clear JSON error that credits nothing and, being
// no guess at a code, counts no failure.
func TestRedeemRefusals(t *testing.T) {
	fs := fastBackend(t)
	e := newEnv(t, envOptions{ollama: fs.URL, limits: "auth_failure_limit 2/1h"})
	ctx := context.Background()
	code, _, _ := e.store.CreateCode(ctx, ledger.NewCode{Credits: 4, MaxUses: 10})
	acct, key := e.account(0)
	testKey, _, err := e.store.CreateKey(ctx, acct.ID, ledger.Test, "t", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	_, disabledKey := e.disabledAccount(0)
	for _, c := range []struct {
		req    *http.Request
		status int
		code   string
	}{
		{apiRequest("GET", redeemPath, key, ""), 405, "method_not_allowed"},
		{apiRequest("POST", redeemPath, "", `{"code":"`+code+`"}`), 401, "missing_api_key"},
		{apiRequest("POST", redeemPath, testKey, `{"code":"`+code+`"}`), 403, "live_key_required"},
		{apiRequest("POST", redeemPath, disabledKey, `{"code":"`+code+`"}`), 403, "account_disabled"},
		{apiRequest("POST", redeemPath, key, `{"code":"x"}`, "Content-Type", "text/plain"), 415, "unsupported_media_type"},
		{apiRequest("POST", redeemPath, key, `{"code":"`+strings.Repeat("A", 2000)+`"}`), 413, "body_too_large"},
		{apiRequest("POST", redeemPath, key, `{"code":`), 400, "invalid_json"},
		{apiRequest("POST", redeemPath, key, `"code"`), 400, "invalid_json"},
		{apiRequest("POST", redeemPath, key, `{"code":"a"} {}`), 400, "invalid_json"},
		{apiRequest("POST", redeemPath, key, `{}`), 400, "missing_field"},
		{apiRequest("POST", redeemPath, key, `{"code":null}`), 400, "invalid_field"},
		{apiRequest("POST", redeemPath, key, `{"code":"a","code":"b"}`), 400, "invalid_field"},
		{apiRequest("POST", redeemPath, key, `{"code":"a","credits":5}`), 400, "unknown_field"},
	} {
		resp, err := e.client.Do(c.req)
		if err != nil {
			t.Fatal(err)
		}
		if b := decodeErr(t, resp); resp.StatusCode != c.status || b.Error.Code != c.code || b.Error.Message == "" {
			t.Errorf("%s %s: %d %s, want %d %s", c.req.Method, c.req.URL.Path, resp.StatusCode, b.Error.Code, c.status, c.code)
		}
	}
	// None of them was a guess: the address still has its failures, and the code works.
	if r := e.redeemPost(key, code); r.StatusCode != 200 {
		t.Fatalf("redeem after the refusals: %d", r.StatusCode)
	}
	if bal := e.balance(acct.ID); bal.Balance != 4 || bal.TestBalance != 0 {
		t.Fatalf("balance %+v, want 4 live", bal)
	}
}
