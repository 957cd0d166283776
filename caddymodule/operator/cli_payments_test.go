package operator

import (
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
)

// TestCLIUnmatchedPayments follows a paid session that credits nothing as the operator meets
// it: the webhook keeps it, `payments list` shows it, the operator credits it by hand and
// resolves it, and the list is empty again; a resolved payment stays in `--all`.
func TestCLIUnmatchedPayments(t *testing.T) {
	const secret = "whsec_cli_payments"
	s, url := startStripeServer(t, secret)
	acct := caddyproc.Str(t, s.JSON("account", "create", "--email", "payer@example.com", "--test-credits", "0"), "id")

	// Nothing yet.
	if got := caddyproc.List(t, s.JSON("payments", "list"), "payments"); len(got) != 0 {
		t.Fatalf("payments list on a new ledger: %v", got)
	}
	if res := s.Textgen("payments", "list"); res.Code != 0 || !strings.Contains(res.Stdout, "No open unmatched payment") {
		t.Fatalf("payments list table on a new ledger: %v", res)
	}

	// Two sessions paid for an account that does not exist (a customer's account deleted, a
	// session made by hand): each credits nothing and is kept, once however often it is sent.
	for _, session := range []string{"cs_test_lost_1", "cs_test_lost_2", "cs_test_lost_1"} {
		caddyproc.MustFail(t, s.Textgen("stripe", "webhook", "--url", url, "--secret", secret, "--account", "acct_0000000000000000",
			"--session", session, "--json"), 1, "nothing was credited", "unknown account", "payments list")
	}
	open := caddyproc.List(t, s.JSON("payments", "list"), "payments")
	if len(open) != 2 || open[0]["reference"] != "cs_test_lost_2" || open[1]["reference"] != "cs_test_lost_1" {
		t.Fatalf("payments list: want the two sessions, newest first: %v", open)
	}
	p := open[1]
	if p["problem"] != "unknown_account" || p["account_id"] != "acct_0000000000000000" || caddyproc.Num(t, p, "amount_cents") != 200 ||
		p["currency"] != "eur" || p["package"] != "10" || caddyproc.Num(t, p, "credits") != 10 || p["event"] == nil || p["resolved"] != nil {
		t.Errorf("the kept payment: %v", p)
	}
	res := s.Textgen("payments", "list")
	if res.Code != 0 || !strings.Contains(res.Stdout, "REFERENCE") || !strings.Contains(res.Stdout, "cs_test_lost_1") ||
		!strings.Contains(res.Stdout, "2.00 EUR") || !strings.Contains(res.Stdout, "unknown_account") || !strings.Contains(res.Stdout, "payments resolve") {
		t.Errorf("payments list table: %v", res)
	}

	// The operator credits the right account by hand, under the session id, and resolves it.
	s.JSON("credits", "grant", "--account", acct, "--credits", "10", "--reference", "cs_test_lost_1")
	resolved := s.JSON("payments", "resolve", "--reference", "cs_test_lost_1", "--note", "credited "+acct+" by hand")
	pay, _ := resolved["payment"].(map[string]any)
	if resolved["repeated"] != false || pay["reference"] != "cs_test_lost_1" || pay["resolution"] != "credited "+acct+" by hand" || pay["resolved"] == nil {
		t.Fatalf("payments resolve: %v", resolved)
	}
	// Resolving again changes nothing and says so; the first note stays.
	again := s.JSON("payments", "resolve", "--reference", "cs_test_lost_1", "--note", "refunded")
	if pay, _ := again["payment"].(map[string]any); again["repeated"] != true || pay["resolution"] != "credited "+acct+" by hand" {
		t.Fatalf("payments resolve again: %v", again)
	}
	if res := s.Textgen("payments", "resolve", "--reference", "cs_test_lost_1", "--note", "refunded"); res.Code != 0 || !strings.Contains(res.Stdout, "was resolved before") {
		t.Errorf("payments resolve again, table: %v", res)
	}
	if res := s.Textgen("payments", "resolve", "--reference", "cs_test_lost_2", "--note", "refunded in Stripe"); res.Code != 0 || !strings.Contains(res.Stdout, "is resolved: refunded in Stripe") {
		t.Errorf("payments resolve, table: %v", res)
	}

	// Open: none left. All: both, with their notes.
	if got := caddyproc.List(t, s.JSON("payments", "list"), "payments"); len(got) != 0 {
		t.Fatalf("payments list after resolving both: %v", got)
	}
	all := caddyproc.List(t, s.JSON("payments", "list", "--all"), "payments")
	if len(all) != 2 || all[0]["resolution"] != "refunded in Stripe" || all[1]["resolution"] != "credited "+acct+" by hand" {
		t.Fatalf("payments list --all: %v", all)
	}
	if got := caddyproc.List(t, s.JSON("payments", "list", "--all", "--limit", "1"), "payments"); len(got) != 1 || got[0]["reference"] != "cs_test_lost_2" {
		t.Fatalf("payments list --all --limit 1: %v", got)
	}
	if got := caddyproc.Num(t, s.JSON("balance", "--account", acct), "available"); got != 10 {
		t.Fatalf("available after the grant by hand: %d, want 10", got)
	}

	// Mistakes.
	caddyproc.MustFail(t, s.Textgen("payments", "resolve", "--reference", "cs_test_nope", "--note", "x", "--json"), 1, "cs_test_nope", "not found")
	caddyproc.MustFail(t, s.Textgen("payments", "resolve", "--reference", "cs_test_lost_1", "--json"), 2, "--note is required")
	caddyproc.MustFail(t, s.Textgen("payments", "resolve", "--note", "x", "--json"), 2, "--reference is required")
	caddyproc.MustFail(t, s.Textgen("payments", "list", "--limit", "0", "--json"), 2, "--limit")
}
