package caddymodule

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLICommands runs every `caddy textgen` command of the built binary against a running
// server, checks its --json output, its tables, and its errors.
func TestCLICommands(t *testing.T) {
	s := startCLIServer(t, filepath.Join(t.TempDir(), "ledger"))

	// account create, duplicate email
	acct := s.json("account", "create", "--email", "Alice@Example.com")
	id := jsonStr(t, acct, "id")
	if jsonStr(t, acct, "email") != "alice@example.com" || jsonStr(t, acct, "status") != "active" {
		t.Errorf("account create: %v", acct)
	}
	mustFail(t, s.textgen("account", "create", "--email", "alice@example.com", "--json"), 1, "alice@example.com", "exists")
	mustFail(t, s.textgen("account", "create", "--email", "not an email", "--json"), 1, "not a valid address")
	mustFail(t, s.textgen("account", "create", "--json"), 2, "--email is required")
	other := jsonStr(t, s.json("account", "create", "--email", "bob@example.com"), "id")

	// account list, get, disable, enable
	accts := jsonList(t, s.json("account", "list"), "accounts")
	if len(accts) != 2 {
		t.Errorf("account list: want 2 accounts, got %v", accts)
	}
	page := s.json("account", "list", "--limit", "1")
	if len(jsonList(t, page, "accounts")) != 1 || jsonStr(t, page, "next_cursor") == "" {
		t.Errorf("account list --limit 1: want one account and a next_cursor, got %v", page)
	}
	rest := s.json("account", "list", "--limit", "1", "--cursor", jsonStr(t, page, "next_cursor"))
	if got := jsonList(t, rest, "accounts"); len(got) != 1 || got[0]["id"] == jsonList(t, page, "accounts")[0]["id"] {
		t.Errorf("account list second page: %v after %v", rest, page)
	}
	got := s.json("account", "get", "--account", id)
	if jsonStr(t, got, "id") != id || jsonStr(t, got, "email") != "alice@example.com" {
		t.Errorf("account get: %v", got)
	}
	if st := jsonStr(t, s.json("account", "disable", "--account", id), "status"); st != "disabled" {
		t.Errorf("account disable: status %q", st)
	}
	if st := jsonStr(t, s.json("account", "get", "--account", id), "status"); st != "disabled" {
		t.Errorf("account get after disable: status %q", st)
	}
	if st := jsonStr(t, s.json("account", "enable", "--account", id), "status"); st != "active" {
		t.Errorf("account enable: status %q", st)
	}

	// unknown account, for every command that takes one
	for _, args := range [][]string{
		{"account", "get"}, {"account", "disable"}, {"account", "enable"},
		{"key", "create"}, {"key", "list"}, {"key", "revoke", "--key-id", "key_x"},
		{"credits", "grant", "--credits", "1"}, {"credits", "adjust", "--credits", "1", "--reason", "r"},
		{"balance"}, {"history"}, {"usage"},
	} {
		res := s.textgen(append(args, "--account", "acct_nope", "--json")...)
		mustFail(t, res, 1, "account acct_nope not found")
	}
	mustFail(t, s.textgen("balance", "--json"), 2, "--account is required")

	// keys
	live := s.json("key", "create", "--account", id, "--name", "ci")
	liveKey, liveID := jsonStr(t, live, "key"), jsonStr(t, live, "id")
	if !strings.HasPrefix(liveKey, "tg_live_") || len(liveKey) != len("tg_live_")+36 {
		t.Errorf("key create: key %q", liveKey)
	}
	if jsonStr(t, live, "mode") != "live" || jsonStr(t, live, "name") != "ci" || jsonBool(t, live, "revoked") {
		t.Errorf("key create: %v", live)
	}
	test := s.json("key", "create", "--account", id, "--test", "--name", "sandbox", "--expires", "30d")
	testKey := jsonStr(t, test, "key")
	if !strings.HasPrefix(testKey, "tg_test_") || jsonStr(t, test, "mode") != "test" || jsonStr(t, test, "expires") == "" {
		t.Errorf("key create --test --expires 30d: %v", test)
	}
	mustFail(t, s.textgen("key", "create", "--account", id, "--expires", "2001-01-01T00:00:00Z", "--json"), 2, "in the past")
	mustFail(t, s.textgen("key", "create", "--account", id, "--expires", "soon", "--json"), 2, "--expires")
	ks := s.textgen("key", "list", "--account", id, "--json")
	keys := jsonList(t, mustOneJSON(t, ks), "keys")
	if len(keys) != 2 {
		t.Fatalf("key list: want 2 keys, got %v", keys)
	}
	for _, secret := range []string{liveKey, testKey} {
		for _, res := range []cliResult{ks, s.textgen("account", "get", "--account", id, "--json"), s.textgen("key", "list", "--account", id)} {
			if strings.Contains(res.stdout, secret) || strings.Contains(res.stdout, secret[8:]) {
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
	rev := s.json("key", "revoke", "--account", id, "--key-id", liveID)
	if !jsonBool(t, rev, "revoked") || jsonStr(t, rev, "id") != liveID || jsonStr(t, rev, "status") != "revoked" {
		t.Errorf("key revoke: %v", rev)
	}
	mustFail(t, s.textgen("key", "revoke", "--account", id, "--key-id", liveID, "--json"), 1, "already revoked")
	mustFail(t, s.textgen("key", "revoke", "--account", id, "--key-id", "key_nope", "--json"), 1, "has no key key_nope")
	mustFail(t, s.textgen("key", "revoke", "--account", other, "--key-id", jsonStr(t, test, "id"), "--json"), 1, "has no key")

	// credits: grant, the same reference twice, test credits, adjust
	g := s.json("credits", "grant", "--account", id, "--credits", "10", "--reference", "inv-1")
	if jsonNum(t, g, "available") != 10 || jsonBool(t, g, "repeated") || jsonNum(t, g, "credited") != 10 {
		t.Errorf("credits grant: %v", g)
	}
	g2 := s.json("credits", "grant", "--account", id, "--credits", "10", "--reference", "inv-1")
	if jsonNum(t, g2, "available") != 10 || !jsonBool(t, g2, "repeated") || jsonNum(t, g2, "credited") != 0 {
		t.Errorf("credits grant with a used reference: want repeated, nothing credited, available 10; got %v", g2)
	}
	if out := s.textgen("credits", "grant", "--account", id, "--credits", "10", "--reference", "inv-1"); out.code != 0 || !strings.Contains(out.stdout, "nothing was credited") {
		t.Errorf("credits grant table with a used reference\n%s", out)
	}
	if a := jsonNum(t, s.json("credits", "grant", "--account", id, "--credits", "5"), "available"); a != 15 {
		t.Errorf("credits grant without reference: available %d, want 15", a)
	}
	if a := jsonNum(t, s.json("credits", "grant", "--account", id, "--credits", "3", "--test"), "available"); a != 3 {
		t.Errorf("credits grant --test: available %d, want 3", a)
	}
	mustFail(t, s.textgen("credits", "grant", "--account", id, "--credits", "-1", "--json"), 2, "positive")
	mustFail(t, s.textgen("credits", "grant", "--account", id, "--json"), 2, "--credits is required")
	adj := s.json("credits", "adjust", "--account", id, "--credits", "-4", "--reason", "refund of a failed batch")
	if jsonNum(t, adj, "available") != 11 || jsonStr(t, adj, "kind") != "adjustment" {
		t.Errorf("credits adjust -4: %v", adj)
	}
	mustFail(t, s.textgen("credits", "adjust", "--account", id, "--credits=-12", "--reason", "too much", "--json"), 1, "below zero", "available 11")
	mustFail(t, s.textgen("credits", "adjust", "--account", id, "--credits", "-1", "--json"), 2, "--reason is required")

	// balance
	b := s.json("balance", "--account", id)
	if jsonNum(t, b, "balance") != 11 || jsonNum(t, b, "available") != 11 || jsonNum(t, b, "test_available") != 3 {
		t.Errorf("balance: %v", b)
	}
	if ob := s.json("balance", "--account", other); jsonNum(t, ob, "balance") != 0 || jsonNum(t, ob, "test_available") != 0 {
		t.Errorf("balance of the other account: %v", ob)
	}

	// history: newest first, every credit change, paged
	h := s.json("history", "--account", id)
	entries := jsonList(t, h, "entries")
	var kinds []string
	for _, e := range entries {
		kinds = append(kinds, fmt.Sprintf("%v:%v:%v", e["kind"], e["mode"], e["amount"]))
	}
	if want := "adjustment:live:-4 grant:test:3 grant:live:5 grant:live:10"; strings.Join(kinds, " ") != want {
		t.Errorf("history: %v, want %s", kinds, want)
	}
	h1 := s.json("history", "--account", id, "--limit", "1")
	if len(jsonList(t, h1, "entries")) != 1 || jsonStr(t, h1, "next_cursor") == "" {
		t.Errorf("history --limit 1: %v", h1)
	}

	// usage: no generation ran, so the summary is empty but complete
	for _, args := range [][]string{{"usage"}, {"usage", "--account", id, "--from", "2020-01-01", "--to", "2999-12-31"}} {
		u := s.json(args...)
		for _, k := range []string{"rows", "by_tool", "by_day", "total"} {
			if l := jsonList(t, u, k); len(l) != 0 {
				t.Errorf("%v: %s = %v, want empty", args, k, l)
			}
		}
	}
	// usage with requests: a test key draws test credits and never calls a model
	sandbox := jsonStr(t, s.json("key", "create", "--account", other, "--test"), "key")
	s.json("credits", "grant", "--account", other, "--credits", "2", "--test")
	for i, want := range []int{200, 200, 402} {
		if got := s.generate(sandbox, "email-writer"); got != want {
			t.Errorf("generate #%d with a test key: status %d, want %d", i+1, got, want)
		}
	}
	u := s.json("usage", "--account", other)
	rows, byTool, total := jsonList(t, u, "rows"), jsonList(t, u, "by_tool"), jsonList(t, u, "total")
	if len(rows) != 1 || rows[0]["tool"] != "email-writer" || rows[0]["mode"] != "test" ||
		fmt.Sprintf("%v %v %v", rows[0]["requests"], rows[0]["settled"], rows[0]["voided"]) != "2 2 0" {
		t.Errorf("usage rows: %v", rows)
	}
	if len(byTool) != 1 || byTool[0]["tool"] != "email-writer" || len(total) != 1 || fmt.Sprint(total[0]["settled"]) != "2" {
		t.Errorf("usage sums: by_tool %v, total %v", byTool, total)
	}
	if u := s.json("usage"); len(jsonList(t, u, "rows")) != 1 {
		t.Errorf("usage of all accounts: %v", u)
	}
	if u := s.json("usage", "--account", id); len(jsonList(t, u, "rows")) != 0 {
		t.Errorf("usage of an account without requests: %v", u)
	}
	if u := s.json("usage", "--to", "2001-01-01"); len(jsonList(t, u, "rows")) != 0 {
		t.Errorf("usage before any request: %v", u)
	}
	if res := s.textgen("usage"); res.code != 0 || !strings.Contains(res.stdout, "email-writer") || !strings.Contains(res.stdout, "TOTAL") {
		t.Errorf("usage table\n%s", res)
	}
	mustFail(t, s.textgen("usage", "--from", "yesterday", "--json"), 1, "from")
	mustFail(t, s.textgen("usage", "--from", "2025-02-01", "--to", "2025-01-01", "--json"), 1, "before")

	// verify
	v := s.json("ledger", "verify")
	if !jsonBool(t, v, "ok") || jsonNum(t, v, "accounts") != 2 || len(jsonList(t, v, "problems")) != 0 {
		t.Errorf("ledger verify: %v", v)
	}

	// the admin address read from the config instead of --address
	if v := mustOneJSON(t, runCaddy(t, s.home, "textgen", "ledger", "verify", "--config", s.config, "--adapter", "caddyfile", "--json")); !jsonBool(t, v, "ok") {
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
		res := s.textgen(c.args...)
		if res.code != 0 {
			t.Errorf("want exit 0\n%s", res)
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(res.stdout), "{") {
			t.Errorf("a table was expected, not JSON\n%s", res)
		}
		for _, w := range c.want {
			if !strings.Contains(res.stdout, w) {
				t.Errorf("table does not show %q\n%s", w, res)
			}
		}
	}
	if res := s.textgen("key", "create", "--account", other); res.code != 0 || !strings.Contains(res.stdout, "shown only this once") || !strings.Contains(res.stdout, "tg_live_") {
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
		id := jsonStr(t, s.json("account", "create", "--email", fmt.Sprintf("user%d@example.com", i)), "id")
		s.json("key", "create", "--account", id, "--name", "k")
		s.json("key", "create", "--account", id, "--test")
		if grant > 0 {
			s.json("credits", "grant", "--account", id, "--credits", fmt.Sprint(grant), "--reference", fmt.Sprint("ref-", i))
			s.json("credits", "grant", "--account", id, "--credits", "2", "--test")
			s.json("credits", "adjust", "--account", id, "--credits", "-1", "--reason", "correction")
		}
		accts = append(accts, acctState{id: id})
	}
	s.json("account", "disable", "--account", accts[1].id)
	// requests leave holds and settlements in the ledger and in the usage summary
	sandbox := jsonStr(t, s.json("key", "create", "--account", accts[2].id, "--test"), "key")
	if st := s.generate(sandbox, "email-writer"); st != 200 {
		t.Errorf("generate with a test key: status %d", st)
	}
	usageBefore := s.textgen("usage", "--json").stdout
	for i := range accts {
		accts[i].balance = s.json("balance", "--account", accts[i].id)
	}
	keysBefore := s.textgen("key", "list", "--account", accts[2].id, "--json").stdout
	listBefore := s.textgen("account", "list", "--json").stdout

	backup := filepath.Join(work, "ledger.backup")
	bk := s.json("backup", "--output", backup)
	if jsonStr(t, bk, "output") != backup || jsonNum(t, bk, "bytes") <= 0 || len(jsonStr(t, bk, "sha256")) != 64 {
		t.Errorf("backup: %v", bk)
	}
	if fi, err := os.Stat(backup); err != nil || fi.Size() != jsonNum(t, bk, "bytes") {
		t.Fatalf("backup file: %v %v", fi, err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(work, ".ledger.backup.part-*")); len(leftovers) != 0 {
		t.Errorf("backup left temporary files: %v", leftovers)
	}
	s.stop()

	// restore refuses a directory that is not empty, such as the live ledger itself
	home := t.TempDir()
	res := runCaddy(t, home, "textgen", "restore", "--input", backup, "--ledger", filepath.Join(work, "ledger"), "--json")
	mustFail(t, res, 1, "not empty")
	busy := filepath.Join(work, "busy")
	if err := os.MkdirAll(busy, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(busy, "note.txt"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustFail(t, runCaddy(t, home, "textgen", "restore", "--input", backup, "--ledger", busy, "--json"), 1, "not empty")
	if b, err := os.ReadFile(filepath.Join(busy, "note.txt")); err != nil || string(b) != "keep me" {
		t.Errorf("a refused restore touched the directory: %q %v", b, err)
	}
	mustFail(t, runCaddy(t, home, "textgen", "restore", "--input", backup, "--json"), 2, "--ledger is required")
	mustFail(t, runCaddy(t, home, "textgen", "restore", "--input", filepath.Join(work, "missing.backup"), "--ledger", filepath.Join(work, "x"), "--json"), 1, "missing.backup")

	// restore into an empty directory, and into one that does not exist yet
	empty := filepath.Join(work, "restored")
	if err := os.MkdirAll(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	r := mustOneJSON(t, runCaddy(t, home, "textgen", "restore", "--input", backup, "--ledger", empty, "--json"))
	if !jsonBool(t, r, "restored") || jsonStr(t, r, "ledger") != empty {
		t.Errorf("restore: %v", r)
	}
	fresh := filepath.Join(work, "new", "ledger")
	mustOneJSON(t, runCaddy(t, home, "textgen", "restore", "--input", backup, "--ledger", fresh, "--json"))

	for _, dir := range []string{empty, fresh} {
		s2 := startCLIServer(t, dir)
		v := s2.json("ledger", "verify")
		if !jsonBool(t, v, "ok") || jsonNum(t, v, "accounts") != int64(len(accts)) {
			t.Errorf("verify after restore into %s: %v", dir, v)
		}
		for _, a := range accts {
			after := s2.json("balance", "--account", a.id)
			if fmt.Sprint(after) != fmt.Sprint(a.balance) {
				t.Errorf("balance of %s after restore: %v, before %v", a.id, after, a.balance)
			}
		}
		if got := s2.textgen("usage", "--json").stdout; got != usageBefore {
			t.Errorf("usage after restore:\n%s\nbefore:\n%s", got, usageBefore)
		}
		if got := s2.textgen("account", "list", "--json").stdout; got != listBefore {
			t.Errorf("account list after restore:\n%s\nbefore:\n%s", got, listBefore)
		}
		if got := s2.textgen("key", "list", "--account", accts[2].id, "--json").stdout; got != keysBefore {
			t.Errorf("key list after restore:\n%s\nbefore:\n%s", got, keysBefore)
		}
		// the restored ledger is a working one
		if a := jsonNum(t, s2.json("credits", "grant", "--account", accts[0].id, "--credits", "1"), "available"); a != jsonNum(t, accts[0].balance, "available")+1 {
			t.Errorf("grant after restore: available %d", a)
		}
		if g := s2.json("credits", "grant", "--account", accts[0].id, "--credits", "7", "--reference", "ref-0"); !jsonBool(t, g, "repeated") {
			t.Errorf("a reference used before the backup is not remembered after the restore: %v", g)
		}
		s2.stop()
	}
}

// TestCLINoLedger: with no textgen handler in the config, the admin module still loads and says
// why it cannot answer.
func TestCLINoLedger(t *testing.T) {
	s := startCLIServer(t, "")
	mustFail(t, s.textgen("ledger", "verify", "--json"), 1, "no textgen ledger is open: the config has no textgen handler")
	mustFail(t, s.textgen("account", "create", "--email", "a@example.com", "--json"), 1, "no textgen ledger is open")
}

// TestCLIUnreachable: a command without a server fails with a message that says what to check.
func TestCLIUnreachable(t *testing.T) {
	home := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", cliFreePort(t))
	mustFail(t, runCaddy(t, home, "textgen", "balance", "--account", "acct_x", "--address", addr, "--json"), 1,
		"cannot reach Caddy's admin API at "+addr, "--address")
	mustFail(t, runCaddy(t, home, "textgen", "ledger", "verify", "--address", addr), 1, "cannot reach")
	// a usage error is found before any request
	mustFail(t, runCaddy(t, home, "textgen", "credits", "grant", "--account", "acct_x", "--address", addr), 2, "--credits is required")
	if res := runCaddy(t, home, "textgen", "--help"); res.code != 0 || !strings.Contains(res.stdout, "never make it reachable") {
		t.Errorf("textgen --help\n%s", res)
	}
	// a mistyped command fails instead of printing the help and exiting 0
	for _, args := range [][]string{{"textgen", "acount"}, {"textgen", "account", "lst"}, {"textgen", "balance", "extra"}} {
		if res := runCaddy(t, home, args...); res.code == 0 || !strings.Contains(res.stderr, "unknown command") {
			t.Errorf("want a failure with \"unknown command\"\n%s", res)
		}
	}
	if res := runCaddy(t, home, "textgen", "account"); res.code != 0 || !strings.Contains(res.stdout, "Available Commands") {
		t.Errorf("a bare command group prints its help\n%s", res)
	}
}
