package caddymodule

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/ledger"
)

// openAPIErrorCodes are the error codes docs/openapi.json lists (every x-error-codes) for the
// answers in this API's own shape: the clients of docs/clients call generate and generations,
// never the OpenAI-compatible paths, whose answers (OpenAIErrorBody) are for OpenAI's SDKs.
func openAPIErrorCodes(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "docs", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var codes []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if openAIErrorAnswer(v) {
				return
			}
			for k, x := range v {
				if list, ok := x.([]any); ok && k == "x-error-codes" {
					for _, c := range list {
						if s, ok := c.(string); ok && !seen[s] {
							seen[s] = true
							codes = append(codes, s)
						}
					}
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	if len(codes) < 30 {
		t.Fatalf("docs/openapi.json lists only %d error codes: %v", len(codes), codes)
	}
	return codes
}

// openAIErrorAnswer reports whether resp, an object of the document, is an answer in OpenAI's shape.
func openAIErrorAnswer(resp map[string]any) bool {
	content, _ := resp["content"].(map[string]any)
	js, _ := content["application/json"].(map[string]any)
	schema, _ := js["schema"].(map[string]any)
	return schema["$ref"] == "#/components/schemas/OpenAIErrorBody"
}

// clientMessages is what the client says of each error code it knows (its --codes output).
func clientMessages(t *testing.T, c clientCmd) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := c.command(ctx, "http://127.0.0.1:1", "", "--codes").Output()
	if err != nil {
		t.Fatalf("%s --codes: %v", c.name, err)
	}
	var m map[string]string
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s --codes printed no JSON object: %v\n%s", c.name, err, out)
	}
	return m
}

// TestClientsKnowEveryErrorCode: each client of docs/clients says something of its own for
// every error code docs/openapi.json lists, so a new code cannot be added without them.
func TestClientsKnowEveryErrorCode(t *testing.T) {
	codes := openAPIErrorCodes(t)
	for _, c := range clientCmds(t) {
		msgs := clientMessages(t, c)
		for _, code := range codes {
			if strings.TrimSpace(msgs[code]) == "" {
				t.Errorf("the %s client has no message for the error code %q", c.name, code)
			}
		}
	}
}

// TestClientsErrorCodes runs the clients of docs/clients against the real Caddy for each error
// code a request of theirs can cheaply be answered with, and checks that each exits with the
// code's own message (2 for a 402, 1 for the others) without retrying or printing text; a
// key's spent budget says when it resets. Then a 429 whose Retry-After is longer than the
// clients wait is handed back at once, not waited out.
func TestClientsErrorCodes(t *testing.T) {
	fsrv := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "tok "})
	e := newEnv(t, envOptions{ollama: fsrv.URL, extra: "max_input_chars 40"})
	ctx := context.Background()
	good := genBody("summarizer", "x", "en", "")
	spend := func(key, body string) {
		t.Helper()
		resp, err := e.post(ctx, key, body)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("a first request: %d", resp.StatusCode)
		}
	}
	type errCase struct {
		code, key, body, idem string
		exit                  int
		also                  string // more that the log must say
	}
	for _, c := range clientCmds(t) {
		t.Run(c.name, func(t *testing.T) {
			msgs := clientMessages(t, c)
			_, key := e.account(5)
			_, broke := e.account(0)
			_, expired := e.expiredKey(t, 5)
			acct, budgeted := e.account(5)
			e.setLimits(acct.ID, keyIDOf(t, e, acct.ID), ledger.KeyLimits{BudgetDay: 1})
			spend(budgeted, good)
			_, member, _ := e.cappedMember(5)
			spend(member, good)
			disabled, disabledKey := e.account(5)
			if _, err := e.store.SetAccountStatus(ctx, disabled.ID, ledger.StatusDisabled); err != nil {
				t.Fatal(err)
			}
			acct, toolKey := e.account(5)
			e.setLimits(acct.ID, keyIDOf(t, e, acct.ID), ledger.KeyLimits{AllowedTools: []string{"email-writer"}})
			acct, addrKey := e.account(5)
			e.setLimits(acct.ID, keyIDOf(t, e, acct.ID), ledger.KeyLimits{AllowedCIDRs: []string{"192.0.2.0/24"}})
			idem := "reused-" + c.name
			spendIdem := func() {
				out, log, code := c.run(t, baseURL, key, good, idem)
				if code != 0 || out == "" {
					t.Fatalf("a first request with %s: exit %d, printed %q\n%s", idem, code, out, log)
				}
			}
			spendIdem()
			for _, tc := range []errCase{
				{code: "invalid_json", key: key, body: `[1]`, exit: 1},
				{code: "missing_field", key: key, body: `{"input":"x","language":"en"}`, exit: 1},
				{code: "unknown_field", key: key, body: `{"tool":"summarizer","input":"x","language":"en","colour":"red"}`, exit: 1},
				{code: "empty_input", key: key, body: genBody("summarizer", "", "en", ""), exit: 1},
				{code: "unknown_tool", key: key, body: genBody("no-such-tool", "x", "en", ""), exit: 1},
				{code: "unsupported_language", key: key, body: genBody("summarizer", "x", "tlh", ""), exit: 1},
				{code: "invalid_tone", key: key, body: genBody("email-writer", "x", "en", "furious"), exit: 1},
				{code: "input_too_large", key: key, body: genBody("summarizer", strings.Repeat("long ", 20), "en", ""), exit: 1},
				{code: "invalid_api_key", key: "tg_live_" + strings.Repeat("0", 36), body: good, exit: 1},
				{code: "key_expired", key: expired, body: good, exit: 1},
				{code: "insufficient_credits", key: broke, body: good, exit: 2},
				{code: "key_budget_exhausted", key: budgeted, body: good, exit: 2, also: "budget is used up; resets at 20"},
				{code: "member_cap_reached", key: member, body: good, exit: 2},
				{code: "account_disabled", key: disabledKey, body: good, exit: 1},
				{code: "tool_not_allowed", key: toolKey, body: good, exit: 1},
				{code: "address_not_allowed", key: addrKey, body: good, exit: 1},
				{code: "idempotency_key_reused", key: key, body: genBody("summarizer", "y", "en", ""), idem: idem, exit: 1},
			} {
				out, log, code := c.run(t, baseURL, tc.key, tc.body, tc.idem)
				if code != tc.exit || out != "" || !strings.Contains(log, " "+tc.code+": "+msgs[tc.code]) ||
					!strings.Contains(log, tc.also) || strings.Contains(log, "retrying") || strings.Contains(log, "waiting") {
					t.Errorf("%s: exit %d (want %d), printed %q, log %q; want %q with %q", tc.code, code, tc.exit, out, log, msgs[tc.code], tc.also)
				}
				if strings.Contains(log, tc.key[min(8, len(tc.key)):]) {
					t.Errorf("%s: the log holds the key: %q", tc.code, log)
				}
			}
		})
	}

	// A Retry-After longer than the clients wait (60 s): the 429 is handed back at once.
	e = newEnv(t, envOptions{ollama: fsrv.URL, limits: "rate_limit key 1/10m\n\t\trate_limit account 1000000/1m\n\t\tmax_concurrent_per_account 100"})
	for _, c := range clientCmds(t) {
		_, key := e.account(5)
		spend(key, good)
		out, log, code := c.run(t, baseURL, key, good, "")
		if code != 1 || out != "" || !strings.Contains(log, "rate_limited: too many requests") || strings.Contains(log, "waiting") {
			t.Errorf("%s: a 429 with a long Retry-After: exit %d, printed %q, log %q; want it handed back unwaited", c.name, code, out, log)
		}
	}
}
