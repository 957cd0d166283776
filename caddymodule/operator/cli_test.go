package operator

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
)

// startCLIServer runs caddy with a textgen site whose ledger is ledgerDir (or, when ledgerDir is
// empty, a site without textgen). No model server is needed: the admin API and test keys do not
// call one.
func startCLIServer(t *testing.T, ledgerDir string) *caddyproc.Server {
	t.Helper()
	site := `respond "no textgen here" 404`
	if ledgerDir != "" {
		site = fmt.Sprintf("textgen {\n\t\tledger %s\n\t\tollama http://127.0.0.1:1\n\t}", ledgerDir)
	}
	return caddyproc.Start(t, site, ledgerDir)
}

// TestCLICommands runs every `caddy textgen` command of the built binary against a running
// server, checks its --json output, its tables, and its errors.
func TestCLICommands(t *testing.T) {
	s := startCLIServer(t, filepath.Join(t.TempDir(), "ledger"))

	// account create, duplicate email
	// (no free test credits, so that the grants below are the whole test balance)
	acct := s.JSON("account", "create", "--email", "Alice@Example.com", "--test-credits", "0")
	id := caddyproc.Str(t, acct, "id")
	if caddyproc.Str(t, acct, "email") != "alice@example.com" || caddyproc.Str(t, acct, "status") != "active" {
		t.Errorf("account create: %v", acct)
	}
	caddyproc.MustFail(t, s.Textgen("account", "create", "--email", "alice@example.com", "--json"), 1, "alice@example.com", "exists")
	caddyproc.MustFail(t, s.Textgen("account", "create", "--email", "not an email", "--json"), 1, "not a valid address")
	caddyproc.MustFail(t, s.Textgen("account", "create", "--json"), 2, "--email is required")
	other := caddyproc.Str(t, s.JSON("account", "create", "--email", "bob@example.com", "--test-credits", "0"), "id")

	// account list, get, disable, enable
	accts := caddyproc.List(t, s.JSON("account", "list"), "accounts")
	if len(accts) != 2 {
		t.Errorf("account list: want 2 accounts, got %v", accts)
	}
	page := s.JSON("account", "list", "--limit", "1")
	if len(caddyproc.List(t, page, "accounts")) != 1 || caddyproc.Str(t, page, "next_cursor") == "" {
		t.Errorf("account list --limit 1: want one account and a next_cursor, got %v", page)
	}
	rest := s.JSON("account", "list", "--limit", "1", "--cursor", caddyproc.Str(t, page, "next_cursor"))
	if got := caddyproc.List(t, rest, "accounts"); len(got) != 1 || got[0]["id"] == caddyproc.List(t, page, "accounts")[0]["id"] {
		t.Errorf("account list second page: %v after %v", rest, page)
	}
	got := s.JSON("account", "get", "--account", id)
	if caddyproc.Str(t, got, "id") != id || caddyproc.Str(t, got, "email") != "alice@example.com" {
		t.Errorf("account get: %v", got)
	}
	if st := caddyproc.Str(t, s.JSON("account", "disable", "--account", id), "status"); st != "disabled" {
		t.Errorf("account disable: status %q", st)
	}
	if st := caddyproc.Str(t, s.JSON("account", "get", "--account", id), "status"); st != "disabled" {
		t.Errorf("account get after disable: status %q", st)
	}
	if st := caddyproc.Str(t, s.JSON("account", "enable", "--account", id), "status"); st != "active" {
		t.Errorf("account enable: status %q", st)
	}

	// unknown account, for every command that takes one
	for _, args := range [][]string{
		{"account", "get"}, {"account", "disable"}, {"account", "enable"},
		{"key", "create"}, {"key", "list"}, {"key", "revoke", "--key-id", "key_x"},
		{"key", "limits", "--key-id", "key_x", "--budget-day", "1"}, {"key", "roll", "--key-id", "key_x"},
		{"credits", "grant", "--credits", "1"}, {"credits", "adjust", "--credits", "1", "--reason", "r"},
		{"balance"}, {"history"}, {"usage"},
	} {
		res := s.Textgen(append(args, "--account", "acct_nope", "--json")...)
		caddyproc.MustFail(t, res, 1, "account acct_nope not found")
	}
	caddyproc.MustFail(t, s.Textgen("balance", "--json"), 2, "--account is required")

	// keys
	live := s.JSON("key", "create", "--account", id, "--name", "ci")
	liveKey, liveID := caddyproc.Str(t, live, "key"), caddyproc.Str(t, live, "id")
	if !strings.HasPrefix(liveKey, "tg_live_") || len(liveKey) != len("tg_live_")+36 {
		t.Errorf("key create: key %q", liveKey)
	}
	if caddyproc.Str(t, live, "mode") != "live" || caddyproc.Str(t, live, "name") != "ci" || caddyproc.Bool(t, live, "revoked") {
		t.Errorf("key create: %v", live)
	}
	test := s.JSON("key", "create", "--account", id, "--test", "--name", "sandbox", "--expires", "30d")
	testKey := caddyproc.Str(t, test, "key")
	if !strings.HasPrefix(testKey, "tg_test_") || caddyproc.Str(t, test, "mode") != "test" || caddyproc.Str(t, test, "expires") == "" {
		t.Errorf("key create --test --expires 30d: %v", test)
	}
	caddyproc.MustFail(t, s.Textgen("key", "create", "--account", id, "--expires", "2001-01-01T00:00:00Z", "--json"), 2, "in the past")
	caddyproc.MustFail(t, s.Textgen("key", "create", "--account", id, "--expires", "soon", "--json"), 2, "--expires")
	ks := s.Textgen("key", "list", "--account", id, "--json")
	keys := caddyproc.List(t, caddyproc.MustOneJSON(t, ks), "keys")
	if len(keys) != 2 {
		t.Fatalf("key list: want 2 keys, got %v", keys)
	}
	for _, secret := range []string{liveKey, testKey} {
		for _, res := range []caddyproc.Result{ks, s.Textgen("account", "get", "--account", id, "--json"), s.Textgen("key", "list", "--account", id)} {
			if strings.Contains(res.Stdout, secret) || strings.Contains(res.Stdout, secret[8:]) {
				t.Errorf("a full key is shown after its creation\n%s", res)
			}
		}
	}
	for _, k := range keys {
		for field := range k {
			if strings.Contains(strings.ToLower(field), "digest") || strings.Contains(strings.ToLower(field), "hash") || field == "key" {
				t.Errorf("key list shows field %q: %v", field, k)
			}
		}
	}
	// key limits and roll, as tables: what is left of a budget, and the new secret once.
	testID := caddyproc.Str(t, test, "id")
	if out := s.Textgen("key", "limits", "--account", id, "--key-id", testID, "--budget-day", "5", "--tools", "summarizer"); out.Code != 0 ||
		!strings.Contains(out.Stdout, "5 of 5 left, resets ") || !strings.Contains(out.Stdout, "summarizer") {
		t.Errorf("key limits table\n%s", out)
	}
	caddyproc.MustFail(t, s.Textgen("key", "limits", "--account", id, "--key-id", testID, "--tools", "nope", "--json"), 1, "not a tool")
	// key list shows every key's budgets: what is left and when it resets, in its table and --json.
	if out := s.Textgen("key", "list", "--account", id); out.Code != 0 || !strings.Contains(out.Stdout, "BUDGET DAY") ||
		!strings.Contains(out.Stdout, "5 of 5 left, resets ") || !strings.Contains(out.Stdout, "no limit") {
		t.Errorf("key list table does not show the key's budgets\n%s", out)
	}
	for _, k := range caddyproc.List(t, s.JSON("key", "list", "--account", id), "keys") {
		if k["id"] != testID {
			continue
		}
		rem, _ := k["remaining"].(map[string]any)
		if fmt.Sprint(k["budget_day"]) != "5" || fmt.Sprint(rem["day"]) != "5" || rem["day_resets"] == nil {
			t.Errorf("key list --json does not show the key's day budget: %v", k)
		}
	}
	if out := s.Textgen("key", "roll", "--account", id, "--key-id", testID, "--grace", "1h"); out.Code != 0 ||
		!strings.Contains(out.Stdout, "tg_test_") || !strings.Contains(out.Stdout, "works until") || strings.Contains(out.Stdout, testKey) {
		t.Errorf("key roll table\n%s", out)
	}
	caddyproc.MustFail(t, s.Textgen("key", "roll", "--account", id, "--key-id", testID, "--grace", "8d", "--json"), 1, "0 to 7 days")
	rev := s.JSON("key", "revoke", "--account", id, "--key-id", liveID)
	if !caddyproc.Bool(t, rev, "revoked") || caddyproc.Str(t, rev, "id") != liveID || caddyproc.Str(t, rev, "status") != "revoked" {
		t.Errorf("key revoke: %v", rev)
	}
	caddyproc.MustFail(t, s.Textgen("key", "revoke", "--account", id, "--key-id", liveID, "--json"), 1, "already revoked")
	caddyproc.MustFail(t, s.Textgen("key", "revoke", "--account", id, "--key-id", "key_nope", "--json"), 1, "has no key key_nope")
	caddyproc.MustFail(t, s.Textgen("key", "revoke", "--account", other, "--key-id", caddyproc.Str(t, test, "id"), "--json"), 1, "has no key")

	// credits: grant, the same reference twice, test credits, adjust
	g := s.JSON("credits", "grant", "--account", id, "--credits", "10", "--reference", "inv-1")
	if caddyproc.Num(t, g, "available") != 10 || caddyproc.Bool(t, g, "repeated") || caddyproc.Num(t, g, "credited") != 10 {
		t.Errorf("credits grant: %v", g)
	}
	g2 := s.JSON("credits", "grant", "--account", id, "--credits", "10", "--reference", "inv-1")
	if caddyproc.Num(t, g2, "available") != 10 || !caddyproc.Bool(t, g2, "repeated") || caddyproc.Num(t, g2, "credited") != 0 {
		t.Errorf("credits grant with a used reference: want repeated, nothing credited, available 10; got %v", g2)
	}
	if out := s.Textgen("credits", "grant", "--account", id, "--credits", "10", "--reference", "inv-1"); out.Code != 0 || !strings.Contains(out.Stdout, "nothing was credited") {
		t.Errorf("credits grant table with a used reference\n%s", out)
	}
	if a := caddyproc.Num(t, s.JSON("credits", "grant", "--account", id, "--credits", "5"), "available"); a != 15 {
		t.Errorf("credits grant without reference: available %d, want 15", a)
	}
	if a := caddyproc.Num(t, s.JSON("credits", "grant", "--account", id, "--credits", "3", "--test"), "available"); a != 3 {
		t.Errorf("credits grant --test: available %d, want 3", a)
	}
	caddyproc.MustFail(t, s.Textgen("credits", "grant", "--account", id, "--credits", "-1", "--json"), 2, "positive")
	caddyproc.MustFail(t, s.Textgen("credits", "grant", "--account", id, "--json"), 2, "--credits is required")
	adj := s.JSON("credits", "adjust", "--account", id, "--credits", "-4", "--reason", "refund of a failed batch")
	if caddyproc.Num(t, adj, "available") != 11 || caddyproc.Str(t, adj, "kind") != "adjustment" {
		t.Errorf("credits adjust -4: %v", adj)
	}
	caddyproc.MustFail(t, s.Textgen("credits", "adjust", "--account", id, "--credits=-12", "--reason", "too much", "--json"), 1, "below zero", "available 11")
	caddyproc.MustFail(t, s.Textgen("credits", "adjust", "--account", id, "--credits", "-1", "--json"), 2, "--reason is required")

	// balance
	b := s.JSON("balance", "--account", id)
	if caddyproc.Num(t, b, "balance") != 11 || caddyproc.Num(t, b, "available") != 11 || caddyproc.Num(t, b, "test_available") != 3 {
		t.Errorf("balance: %v", b)
	}
	if ob := s.JSON("balance", "--account", other); caddyproc.Num(t, ob, "balance") != 0 || caddyproc.Num(t, ob, "test_available") != 0 {
		t.Errorf("balance of the other account: %v", ob)
	}

	// history: newest first, every credit change, paged
	h := s.JSON("history", "--account", id)
	entries := caddyproc.List(t, h, "entries")
	var kinds []string
	for _, e := range entries {
		kinds = append(kinds, fmt.Sprintf("%v:%v:%v", e["kind"], e["mode"], e["amount"]))
	}
	if want := "adjustment:live:-4 grant:test:3 grant:live:5 grant:live:10"; strings.Join(kinds, " ") != want {
		t.Errorf("history: %v, want %s", kinds, want)
	}
	h1 := s.JSON("history", "--account", id, "--limit", "1")
	if len(caddyproc.List(t, h1, "entries")) != 1 || caddyproc.Str(t, h1, "next_cursor") == "" {
		t.Errorf("history --limit 1: %v", h1)
	}

	// usage: no generation ran, so the summary is empty but complete
	for _, args := range [][]string{{"usage"}, {"usage", "--account", id, "--from", "2020-01-01", "--to", "2999-12-31"}} {
		u := s.JSON(args...)
		for _, k := range []string{"rows", "by_tool", "by_day", "total"} {
			if l := caddyproc.List(t, u, k); len(l) != 0 {
				t.Errorf("%v: %s = %v, want empty", args, k, l)
			}
		}
	}
	if u := s.JSON("usage", "--account", id, "--from", "2020-01-01", "--to", "2999-12-31"); caddyproc.Str(t, u, "account_id") != id ||
		caddyproc.Str(t, u, "from") != "2020-01-01" || caddyproc.Str(t, u, "to") != "2999-12-31" {
		t.Errorf("usage: the report does not say what it covers: %v", u)
	}
	// usage with requests: a test key draws test credits and never calls a model
	sandbox := caddyproc.Str(t, s.JSON("key", "create", "--account", other, "--test"), "key")
	s.JSON("credits", "grant", "--account", other, "--credits", "2", "--test")
	for i, want := range []int{200, 200, 402} {
		if got := s.Generate(sandbox, "email-writer"); got != want {
			t.Errorf("generate #%d with a test key: status %d, want %d", i+1, got, want)
		}
	}
	u := s.JSON("usage", "--account", other)
	rows, byTool, total := caddyproc.List(t, u, "rows"), caddyproc.List(t, u, "by_tool"), caddyproc.List(t, u, "total")
	if len(rows) != 1 || rows[0]["tool"] != "email-writer" || rows[0]["mode"] != "test" ||
		fmt.Sprintf("%v %v %v", rows[0]["requests"], rows[0]["settled"], rows[0]["voided"]) != "2 2 0" {
		t.Errorf("usage rows: %v", rows)
	}
	if len(byTool) != 1 || byTool[0]["tool"] != "email-writer" || len(total) != 1 || fmt.Sprint(total[0]["settled"]) != "2" {
		t.Errorf("usage sums: by_tool %v, total %v", byTool, total)
	}
	if u := s.JSON("usage"); len(caddyproc.List(t, u, "rows")) != 1 {
		t.Errorf("usage of all accounts: %v", u)
	}
	if u := s.JSON("usage", "--account", id); len(caddyproc.List(t, u, "rows")) != 0 {
		t.Errorf("usage of an account without requests: %v", u)
	}
	if u := s.JSON("usage", "--to", "2001-01-01"); len(caddyproc.List(t, u, "rows")) != 0 {
		t.Errorf("usage before any request: %v", u)
	}
	if res := s.Textgen("usage"); res.Code != 0 || !strings.Contains(res.Stdout, "email-writer") || !strings.Contains(res.Stdout, "TOTAL") {
		t.Errorf("usage table\n%s", res)
	}
	caddyproc.MustFail(t, s.Textgen("usage", "--from", "yesterday", "--json"), 1, "from")
	caddyproc.MustFail(t, s.Textgen("usage", "--from", "2025-02-01", "--to", "2025-01-01", "--json"), 1, "before")

	// verify
	v := s.JSON("ledger", "verify")
	if !caddyproc.Bool(t, v, "ok") || caddyproc.Num(t, v, "accounts") != 2 || len(caddyproc.List(t, v, "problems")) != 0 {
		t.Errorf("ledger verify: %v", v)
	}

	// the admin address read from the config instead of --address
	if v := caddyproc.MustOneJSON(t, caddyproc.Run(t, s.Home, "textgen", "ledger", "verify", "--config", s.Config, "--adapter", "caddyfile", "--json")); !caddyproc.Bool(t, v, "ok") {
		t.Errorf("ledger verify --config: %v", v)
	}

	// readable tables without --json
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"balance", "--account", id}, []string{"CREDITS", "AVAILABLE", "live", "11", "test", "3"}},
		{[]string{"account", "list"}, []string{"ID", "EMAIL", id, "alice@example.com", "bob@example.com"}},
		{[]string{"account", "get", "--account", id}, []string{"alice@example.com", "KEY ID", liveID, "revoked"}},
		{[]string{"key", "list", "--account", id}, []string{"KEY ID", liveID, "tg_live_…" + liveKey[len(liveKey)-4:]}},
		{[]string{"history", "--account", id}, []string{"SEQ", "adjustment", "reason=refund of a failed batch", "reference=inv-1"}},
		{[]string{"usage", "--account", id}, []string{"No requests"}},
		{[]string{"ledger", "verify"}, []string{"ok: 2 accounts"}},
	} {
		res := s.Textgen(c.args...)
		if res.Code != 0 {
			t.Errorf("want exit 0\n%s", res)
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(res.Stdout), "{") {
			t.Errorf("a table was expected, not JSON\n%s", res)
		}
		for _, w := range c.want {
			if !strings.Contains(res.Stdout, w) {
				t.Errorf("table does not show %q\n%s", w, res)
			}
		}
	}
	if res := s.Textgen("key", "create", "--account", other); res.Code != 0 || !strings.Contains(res.Stdout, "shown only this once") || !strings.Contains(res.Stdout, "tg_live_") {
		t.Errorf("key create table\n%s", res)
	}
}

// TestCLIBackupRestore backs a ledger up through the running server, restores it offline into
// an empty directory, and checks that a server on the restored directory verifies clean and
// keeps every balance, account and key.
func TestCLIBackupRestore(t *testing.T) {
	work := t.TempDir()
	s := startCLIServer(t, filepath.Join(work, "ledger"))

	type acctState struct {
		id      string
		balance map[string]any
	}
	var accts []acctState
	for i, grant := range []int{7, 0, 120} {
		id := caddyproc.Str(t, s.JSON("account", "create", "--email", fmt.Sprintf("user%d@example.com", i)), "id")
		s.JSON("key", "create", "--account", id, "--name", "k")
		s.JSON("key", "create", "--account", id, "--test")
		if grant > 0 {
			s.JSON("credits", "grant", "--account", id, "--credits", fmt.Sprint(grant), "--reference", fmt.Sprint("ref-", i))
			s.JSON("credits", "grant", "--account", id, "--credits", "2", "--test")
			s.JSON("credits", "adjust", "--account", id, "--credits", "-1", "--reason", "correction")
		}
		accts = append(accts, acctState{id: id})
	}
	s.JSON("account", "disable", "--account", accts[1].id)
	// requests leave holds and settlements in the ledger and in the usage summary
	sandbox := caddyproc.Str(t, s.JSON("key", "create", "--account", accts[2].id, "--test"), "key")
	if st := s.Generate(sandbox, "email-writer"); st != 200 {
		t.Errorf("generate with a test key: status %d", st)
	}
	usageBefore := s.Textgen("usage", "--json").Stdout
	for i := range accts {
		accts[i].balance = s.JSON("balance", "--account", accts[i].id)
	}
	keysBefore := s.Textgen("key", "list", "--account", accts[2].id, "--json").Stdout
	listBefore := s.Textgen("account", "list", "--json").Stdout

	backup := filepath.Join(work, "ledger.backup")
	bk := s.JSON("backup", "--output", backup)
	if caddyproc.Str(t, bk, "output") != backup || caddyproc.Num(t, bk, "bytes") <= 0 || len(caddyproc.Str(t, bk, "sha256")) != 64 {
		t.Errorf("backup: %v", bk)
	}
	if fi, err := os.Stat(backup); err != nil || fi.Size() != caddyproc.Num(t, bk, "bytes") {
		t.Fatalf("backup file: %v %v", fi, err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(work, ".ledger.backup.part-*")); len(leftovers) != 0 {
		t.Errorf("backup left temporary files: %v", leftovers)
	}
	s.Stop()

	// restore refuses a directory that is not empty, such as the live ledger itself
	home := t.TempDir()
	res := caddyproc.Run(t, home, "textgen", "restore", "--input", backup, "--ledger", filepath.Join(work, "ledger"), "--json")
	caddyproc.MustFail(t, res, 1, "not empty")
	busy := filepath.Join(work, "busy")
	if err := os.MkdirAll(busy, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(busy, "note.txt"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	caddyproc.MustFail(t, caddyproc.Run(t, home, "textgen", "restore", "--input", backup, "--ledger", busy, "--json"), 1, "not empty")
	if b, err := os.ReadFile(filepath.Join(busy, "note.txt")); err != nil || string(b) != "keep me" {
		t.Errorf("a refused restore touched the directory: %q %v", b, err)
	}
	caddyproc.MustFail(t, caddyproc.Run(t, home, "textgen", "restore", "--input", backup, "--json"), 2, "--ledger is required")
	caddyproc.MustFail(t, caddyproc.Run(t, home, "textgen", "restore", "--input", filepath.Join(work, "missing.backup"), "--ledger", filepath.Join(work, "x"), "--json"), 1, "missing.backup")

	// restore into an empty directory, and into one that does not exist yet
	empty := filepath.Join(work, "restored")
	if err := os.MkdirAll(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	r := caddyproc.MustOneJSON(t, caddyproc.Run(t, home, "textgen", "restore", "--input", backup, "--ledger", empty, "--json"))
	if !caddyproc.Bool(t, r, "restored") || caddyproc.Str(t, r, "ledger") != empty ||
		caddyproc.Str(t, r, "input") != backup || caddyproc.Num(t, r, "bytes") != caddyproc.Num(t, bk, "bytes") {
		t.Errorf("restore: %v", r)
	}
	fresh := filepath.Join(work, "new", "ledger")
	caddyproc.MustOneJSON(t, caddyproc.Run(t, home, "textgen", "restore", "--input", backup, "--ledger", fresh, "--json"))

	for _, dir := range []string{empty, fresh} {
		s2 := startCLIServer(t, dir)
		v := s2.JSON("ledger", "verify")
		if !caddyproc.Bool(t, v, "ok") || caddyproc.Num(t, v, "accounts") != int64(len(accts)) {
			t.Errorf("verify after restore into %s: %v", dir, v)
		}
		for _, a := range accts {
			after := s2.JSON("balance", "--account", a.id)
			if fmt.Sprint(after) != fmt.Sprint(a.balance) {
				t.Errorf("balance of %s after restore: %v, before %v", a.id, after, a.balance)
			}
		}
		if got := s2.Textgen("usage", "--json").Stdout; got != usageBefore {
			t.Errorf("usage after restore:\n%s\nbefore:\n%s", got, usageBefore)
		}
		if got := s2.Textgen("account", "list", "--json").Stdout; got != listBefore {
			t.Errorf("account list after restore:\n%s\nbefore:\n%s", got, listBefore)
		}
		if got := s2.Textgen("key", "list", "--account", accts[2].id, "--json").Stdout; got != keysBefore {
			t.Errorf("key list after restore:\n%s\nbefore:\n%s", got, keysBefore)
		}
		// the restored ledger is a working one
		if a := caddyproc.Num(t, s2.JSON("credits", "grant", "--account", accts[0].id, "--credits", "1"), "available"); a != caddyproc.Num(t, accts[0].balance, "available")+1 {
			t.Errorf("grant after restore: available %d", a)
		}
		if g := s2.JSON("credits", "grant", "--account", accts[0].id, "--credits", "7", "--reference", "ref-0"); !caddyproc.Bool(t, g, "repeated") {
			t.Errorf("a reference used before the backup is not remembered after the restore: %v", g)
		}
		s2.Stop()
	}
}

// TestCLINoLedger: with no textgen handler in the config, the admin module still loads and says
// why it cannot answer.
func TestCLINoLedger(t *testing.T) {
	s := startCLIServer(t, "")
	caddyproc.MustFail(t, s.Textgen("ledger", "verify", "--json"), 1, "no textgen ledger is open: the config has no textgen handler")
	caddyproc.MustFail(t, s.Textgen("account", "create", "--email", "a@example.com", "--json"), 1, "no textgen ledger is open")
}

// TestCLIUnreachable: a command without a server fails with a message that says what to check.
func TestCLIUnreachable(t *testing.T) {
	home := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", caddyproc.FreePort(t))
	caddyproc.MustFail(t, caddyproc.Run(t, home, "textgen", "balance", "--account", "acct_x", "--address", addr, "--json"), 1,
		"cannot reach Caddy's admin API at "+addr, "--address")
	caddyproc.MustFail(t, caddyproc.Run(t, home, "textgen", "ledger", "verify", "--address", addr), 1, "cannot reach")
	// a usage error is found before any request
	caddyproc.MustFail(t, caddyproc.Run(t, home, "textgen", "credits", "grant", "--account", "acct_x", "--address", addr), 2, "--credits is required")
	if res := caddyproc.Run(t, home, "textgen", "--help"); res.Code != 0 || !strings.Contains(res.Stdout, "never make it reachable") {
		t.Errorf("textgen --help\n%s", res)
	}
	// a mistyped command fails instead of printing the help and exiting 0
	for _, args := range [][]string{{"textgen", "acount"}, {"textgen", "account", "lst"}, {"textgen", "balance", "extra"}} {
		if res := caddyproc.Run(t, home, args...); res.Code == 0 || !strings.Contains(res.Stderr, "unknown command") {
			t.Errorf("want a failure with \"unknown command\"\n%s", res)
		}
	}
	if res := caddyproc.Run(t, home, "textgen", "account"); res.Code != 0 || !strings.Contains(res.Stdout, "Available Commands") {
		t.Errorf("a bare command group prints its help\n%s", res)
	}
}
