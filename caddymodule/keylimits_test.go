package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/ledger"
)

// keyIDOf is the id of the account's first key.
func keyIDOf(t *testing.T, e *env, acctID string) string {
	t.Helper()
	keys, err := e.store.ListKeys(context.Background(), acctID)
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys of %s: %v %v", acctID, keys, err)
	}
	return keys[0].ID
}

// setLimits replaces the limits of the account's key kid.
func (e *env) setLimits(acctID, kid string, l ledger.KeyLimits) {
	e.t.Helper()
	if _, err := e.store.UpdateKey(context.Background(), acctID, kid, ledger.KeySettings{Name: "test", Limits: l}); err != nil {
		e.t.Fatal(err)
	}
}

// limitedKey is account(credits) whose key has limits l.
func (e *env) limitedKey(credits int64, l ledger.KeyLimits) (ledger.Account, string) {
	e.t.Helper()
	acct, key := e.account(credits)
	keys, err := e.store.ListKeys(context.Background(), acct.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	e.setLimits(acct.ID, keys[0].ID, l)
	return acct, key
}

// expiredKey is a live key of a new account with credits that has expired: made to expire at
// once, then waited for until the ledger says so.
func (e *env) expiredKey(t *testing.T, credits int64) (ledger.Account, string) {
	t.Helper()
	acct, _ := e.account(credits)
	key, _, err := e.store.CreateKey(context.Background(), acct.ID, ledger.Live, "short", time.Now().Add(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the key's expiry", func() bool {
		_, _, err := e.store.LookupKey(context.Background(), key)
		return errors.Is(err, ledger.ErrKeyExpired)
	})
	return acct, key
}

// keyErr is a JSON error answer as a test reads it.
type keyErr struct {
	status              int
	code, param, msg    string
	resetsAt, used, raw string
	retryAfter          string
}

func (e *env) generateAs(t *testing.T, key, tool string) keyErr {
	t.Helper()
	resp, err := e.post(context.Background(), key, genBody(tool, "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var doc struct {
		Error struct {
			Code, Param, Message string
			ResetsAt             string `json:"resets_at"`
		}
	}
	_ = json.Unmarshal(body, &doc)
	return keyErr{status: resp.StatusCode, code: doc.Error.Code, param: doc.Error.Param, msg: doc.Error.Message,
		resetsAt: doc.Error.ResetsAt, used: resp.Header.Get("X-Credits-Used"), raw: string(body),
		retryAfter: resp.Header.Get("Retry-After")}
}

// TestKeyLimits: a key's limits on the API. A tool or an address it may not use is refused
// before anything is held and costs nothing; a spent budget is 402 key_budget_exhausted with
// when it resets; an expired key 401 key_expired; none of the answers or log lines holds the key;
// GET /api/v1/balance shows what is left of the key's budgets.
func TestKeyLimits(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "tok "})
	logFile := filepath.Join(t.TempDir(), "caddy.log")
	// This test's client is 127.0.0.1, trusted as a proxy: a request that says it forwards
	// another client (X-Forwarded-For) is that client's.
	e := newEnv(t, envOptions{ollama: fs.URL, global: "log {\n\t\toutput file " + logFile + "\n\t\tlevel DEBUG\n\t}\n\t" +
		"servers {\n\t\ttrusted_proxies static 127.0.0.1/32\n\t}"})
	acct, key := e.account(10)
	kid := keyIDOf(t, e, acct.ID)
	costsNothing := func(r keyErr, status int, code, param string) {
		t.Helper()
		if r.status != status || r.code != code || r.param != param || r.used != "0" {
			t.Fatalf("got %d %s (param %q, X-Credits-Used %q), want %d %s: %s", r.status, r.code, r.param, r.used, status, code, r.raw)
		}
		if strings.Contains(r.raw, key[8:]) {
			t.Fatalf("the answer holds the key: %s", r.raw)
		}
	}
	wantBalance := func(available int64, holds int) {
		t.Helper()
		if b := e.balance(acct.ID); b.Available != available || e.holds(acct.ID) != holds {
			t.Fatalf("available %d with %d holds, want %d with %d", b.Available, e.holds(acct.ID), available, holds)
		}
	}

	// Tools: only the ones named.
	e.setLimits(acct.ID, kid, ledger.KeyLimits{AllowedTools: []string{"email-writer", "summarizer"}})
	costsNothing(e.generateAs(t, key, "sql-generator"), 403, "tool_not_allowed", "tool")
	wantBalance(10, 0)
	if r := e.generateAs(t, key, "summarizer"); r.status != 200 {
		t.Fatalf("an allowed tool: %d %s", r.status, r.raw)
	}
	wantBalance(9, 1)

	// Addresses: this test's client is 127.0.0.1 (and ::1 is not it).
	e.setLimits(acct.ID, kid, ledger.KeyLimits{AllowedCIDRs: []string{"192.0.2.0/24", "::1/128"}})
	costsNothing(e.generateAs(t, key, "summarizer"), 403, "address_not_allowed", "")
	wantBalance(9, 1)
	e.setLimits(acct.ID, kid, ledger.KeyLimits{AllowedCIDRs: []string{"192.0.2.0/24", "127.0.0.0/8"}})
	if r := e.generateAs(t, key, "summarizer"); r.status != 200 {
		t.Fatalf("an allowed address: %d %s", r.status, r.raw)
	}
	wantBalance(8, 2)
	// Behind the trusted proxy, the forwarded client's address is the one checked.
	e.setLimits(acct.ID, kid, ledger.KeyLimits{AllowedCIDRs: []string{"198.51.100.0/24"}})
	fwd := func(client string) keyErr {
		t.Helper()
		resp, err := e.post(context.Background(), key, genBody("summarizer", "x", "en", ""), "X-Forwarded-For", client)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var doc struct{ Error struct{ Code, Param string } }
		_ = json.Unmarshal(body, &doc)
		return keyErr{status: resp.StatusCode, code: doc.Error.Code, param: doc.Error.Param, used: resp.Header.Get("X-Credits-Used"), raw: string(body)}
	}
	costsNothing(e.generateAs(t, key, "summarizer"), 403, "address_not_allowed", "") // the proxy itself
	costsNothing(fwd("203.0.113.9"), 403, "address_not_allowed", "")
	if r := fwd("198.51.100.7"); r.status != 200 {
		t.Fatalf("a forwarded client inside the key's range: %d %s", r.status, r.raw)
	}
	wantBalance(7, 3)

	// A total budget counts from when it is set (the 3 credits the key spent without a budget are
	// not counted): a budget of 1 lets one through, then 402, with no reset time (a total budget
	// does not reset).
	e.setLimits(acct.ID, kid, ledger.KeyLimits{BudgetTotal: 1})
	if r := e.generateAs(t, key, "summarizer"); r.status != 200 {
		t.Fatalf("within the budget: %d %s", r.status, r.raw)
	}
	r := e.generateAs(t, key, "summarizer")
	costsNothing(r, 402, "key_budget_exhausted", "")
	if r.resetsAt != "" || r.retryAfter != "" || !strings.Contains(r.msg, "total budget of 1") {
		t.Fatalf("total budget's answer: %s (Retry-After %q)", r.raw, r.retryAfter)
	}
	wantBalance(6, 4)

	// A daily budget (a change between budgets keeps the count: 1 today): reset at the next UTC
	// midnight, said in the message, resets_at and Retry-After.
	e.setLimits(acct.ID, kid, ledger.KeyLimits{BudgetDay: 1, BudgetMonth: 100})
	r = e.generateAs(t, key, "summarizer")
	costsNothing(r, 402, "key_budget_exhausted", "")
	resets, err := time.Parse(time.RFC3339, r.resetsAt)
	if err != nil || resets.Hour() != 0 || resets.Minute() != 0 || !strings.Contains(r.msg, r.resetsAt) || !strings.Contains(r.msg, "daily budget of 1") {
		t.Fatalf("daily budget's answer: %s", r.raw)
	}
	if s, err := strconv.Atoi(r.retryAfter); err != nil || s < 1 || s > 24*3600 {
		t.Fatalf("Retry-After %q", r.retryAfter)
	}
	wantBalance(6, 4)

	// The balance shows the key's budgets beside the account's credits.
	resp := e.get("/api/v1/balance", key)
	var bal struct {
		Available int64  `json:"available"`
		KeyID     string `json:"key_id"`
		KeyBudget struct {
			Day       *int64 `json:"remaining_day"`
			DayResets string `json:"day_resets_at"`
			Month     *int64 `json:"remaining_month"`
			Total     *int64 `json:"remaining_total"`
		} `json:"key_budget"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&bal); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if bal.Available != 6 || bal.KeyID != kid || bal.KeyBudget.Day == nil || *bal.KeyBudget.Day != 0 ||
		bal.KeyBudget.Month == nil || *bal.KeyBudget.Month != 99 || bal.KeyBudget.Total != nil || bal.KeyBudget.DayResets != r.resetsAt {
		t.Fatalf("balance: %+v", bal)
	}

	// An expired key: 401 key_expired, costing nothing.
	expAcct, expKey := e.expiredKey(t, 5)
	r = e.generateAs(t, expKey, "summarizer")
	if r.status != 401 || r.code != "key_expired" || r.used != "0" || strings.Contains(r.raw, expKey[8:]) {
		t.Fatalf("expired key: %d %s", r.status, r.raw)
	}
	if b := e.balance(expAcct.ID); b.Available != 5 {
		t.Fatalf("an expired key's request took credit: %+v", b)
	}

	e.verify()
	// The log lines are written when the requests end, and synced on the next config load.
	newEnv(t, envOptions{ollama: fs.URL})
	logText := readFile(t, logFile)
	if !strings.Contains(logText, "key_expired") || !strings.Contains(logText, "tool_not_allowed") {
		t.Fatalf("the log has no line of the refusals: the scan below proves nothing")
	}
	for _, k := range []string{key, expKey} {
		if strings.Contains(logText, k[8:]) {
			t.Errorf("the log holds a key's secret")
		}
	}
}

// TestKeyLastUsedOnlyWhenHeld: through the server, a key's last use is the time of the last
// request that got its credit held. Requests refused before a hold (no credit: 402; a spent
// budget: 402 key_budget_exhausted; a tool the key may not use: 403) and balance reads leave it
// as it was.
func TestKeyLastUsedOnlyWhenHeld(t *testing.T) {
	e := newEnv(t, envOptions{ollama: modelServer(t)})
	acct, key := e.account(0)
	kid := keyIDOf(t, e, acct.ID)
	lastUsed := func() time.Time {
		t.Helper()
		keys, err := e.store.ListKeys(context.Background(), acct.ID)
		if err != nil || len(keys) != 1 {
			t.Fatalf("keys: %v %v", keys, err)
		}
		return keys[0].LastUsed
	}
	if r := e.generateAs(t, key, "summarizer"); r.status != 402 || r.code != "insufficient_credits" {
		t.Fatalf("no credits: %d %s", r.status, r.raw)
	}
	resp := e.get("/api/v1/balance", key)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("balance: %d", resp.StatusCode)
	}
	if u := lastUsed(); !u.IsZero() {
		t.Fatalf("a refused request and a balance read made the key used at %v", u)
	}

	e.grant(acct.ID, ledger.Live, 5)
	e.setLimits(acct.ID, kid, ledger.KeyLimits{BudgetDay: 1, AllowedTools: []string{"summarizer"}})
	if r := e.generateAs(t, key, "summarizer"); r.status != 200 {
		t.Fatalf("a request within the budget: %d %s", r.status, r.raw)
	}
	held := lastUsed()
	if held.IsZero() {
		t.Fatal("a served request did not make the key used")
	}
	// The ledger notes a key's use at most once a second: let a second pass, so that a refusal
	// that counted as a use would show.
	waitFor(t, "a second past the served request", func() bool { return time.Since(held) > 1100*time.Millisecond })
	if r := e.generateAs(t, key, "summarizer"); r.status != 402 || r.code != "key_budget_exhausted" {
		t.Fatalf("a spent budget: %d %s", r.status, r.raw)
	}
	if r := e.generateAs(t, key, "email-writer"); r.status != 403 || r.code != "tool_not_allowed" {
		t.Fatalf("a tool the key may not use: %d %s", r.status, r.raw)
	}
	if u := lastUsed(); !u.Equal(held) {
		t.Fatalf("refused requests moved the key's last use from %v to %v", held, u)
	}
}
