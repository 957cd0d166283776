package operator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// redeemOver posts {"code": code} with key to the server at addr and returns the status and the
// body.
func redeemOver(t *testing.T, addr, key, code string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/credits/redeem", strings.NewReader(fmt.Sprintf(`{"code":%q}`, code)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("redeem answered %d %q: %v", resp.StatusCode, b, err)
	}
	return resp.StatusCode, doc
}

func errCode(doc map[string]any) string {
	e, _ := doc["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// TestCLICodes: the operator's `code` commands of the built binary against a running server,
// and customers redeeming over HTTP: create (printed once), list, redemptions, disable; the
// errors of each command.
func TestCLICodes(t *testing.T) {
	s := startCLIServer(t, filepath.Join(t.TempDir(), "ledger"))
	created := s.JSON("code", "create", "--credits", "15", "--uses", "2", "--expires", "30d", "--note", "spring launch")
	code, id := caddyproc.Str(t, created, "code"), caddyproc.Str(t, created, "id")
	if caddyproc.Num(t, created, "credits") != 15 || caddyproc.Num(t, created, "max_uses") != 2 || created["state"] != "active" ||
		created["note"] != "spring launch" || created["expires"] == nil || !strings.HasPrefix(code, "TG-") ||
		!strings.HasSuffix(code, caddyproc.Str(t, created, "last4")) {
		t.Fatalf("code create: %v", created)
	}
	table := s.Textgen("code", "create", "--credits", "1")
	if table.Code != 0 || !strings.Contains(table.Stdout, "Code: TG-") || !strings.Contains(table.Stdout, "shown only now") {
		t.Errorf("code create table: %v", table)
	}
	caddyproc.MustFail(t, s.Textgen("code", "create", "--json"), 2, "--credits is required")
	caddyproc.MustFail(t, s.Textgen("code", "create", "--credits", "5", "--uses", "0"), 2, "--uses")
	caddyproc.MustFail(t, s.Textgen("code", "create", "--credits", "5", "--expires", "soon"), 2, "--expires")
	caddyproc.MustFail(t, s.Textgen("code", "create", "--credits", "5", "--expires", "2001-01-01T00:00:00Z"), 2, "not in the future")

	var keys []string
	var accts []string
	for i := range 3 {
		a := caddyproc.Str(t, s.JSON("account", "create", "--email", fmt.Sprintf("c%d@example.com", i), "--test-credits", "0"), "id")
		accts = append(accts, a)
		keys = append(keys, caddyproc.Str(t, s.JSON("key", "create", "--account", a), "key"))
	}
	if st, doc := redeemOver(t, s.HTTP, keys[0], strings.ToLower(code)); st != 200 || caddyproc.Num(t, doc, "credits") != 15 ||
		caddyproc.Num(t, doc, "available") != 15 || doc["code_id"] != id {
		t.Fatalf("redeem: %d %v", st, doc)
	}
	if st, doc := redeemOver(t, s.HTTP, keys[0], code); st != 409 || errCode(doc) != "code_already_redeemed" {
		t.Fatalf("redeem again: %d %v", st, doc)
	}
	if st, _ := redeemOver(t, s.HTTP, keys[1], code); st != 200 {
		t.Fatalf("second account: %d", st)
	}
	if st, doc := redeemOver(t, s.HTTP, keys[2], code); st != 400 || errCode(doc) != "code_not_redeemable" {
		t.Fatalf("third account of a 2-use code: %d %v", st, doc)
	}
	if b := s.JSON("balance", "--account", accts[2]); caddyproc.Num(t, b, "balance") != 0 {
		t.Fatalf("the refused account was credited: %v", b)
	}
	hist := s.Textgen("history", "--account", accts[0])
	if hist.Code != 0 || !strings.Contains(hist.Stdout, "code:"+id) {
		t.Errorf("history does not show the redemption: %v", hist)
	}

	list := caddyproc.List(t, s.JSON("code", "list"), "codes")
	if len(list) != 2 || list[1]["id"] != id || caddyproc.Num(t, list[1], "uses") != 2 || list[1]["state"] != "used up" {
		t.Fatalf("code list: %v", list)
	}
	for _, c := range list {
		if c["code"] != nil {
			t.Errorf("code list shows a code: %v", c)
		}
	}
	if res := s.Textgen("code", "list"); res.Code != 0 || !strings.Contains(res.Stdout, id) || !strings.Contains(res.Stdout, "2/2") ||
		strings.Contains(res.Stdout, code) {
		t.Errorf("code list table: %v", res)
	}
	reds := s.JSON("code", "redemptions", id)
	rs := caddyproc.List(t, reds, "redemptions")
	if len(rs) != 2 || rs[1]["account_id"] != accts[0] && rs[0]["account_id"] != accts[0] {
		t.Fatalf("code redemptions: %v", reds)
	}
	if res := s.Textgen("code", "redemptions", "--id", id); res.Code != 0 || !strings.Contains(res.Stdout, "c0@example.com") {
		t.Errorf("code redemptions table: %v", res)
	}

	// Disable: the next redemption is refused like any code that cannot be redeemed.
	second := s.JSON("code", "create", "--credits", "3", "--uses", "10")
	dis := s.JSON("code", "disable", caddyproc.Str(t, second, "id"), "--note", "leaked")
	if dis["state"] != "disabled" || dis["disabled"] == nil {
		t.Fatalf("code disable: %v", dis)
	}
	if st, doc := redeemOver(t, s.HTTP, keys[2], caddyproc.Str(t, second, "code")); st != 400 || errCode(doc) != "code_not_redeemable" {
		t.Fatalf("redeem a disabled code: %d %v", st, doc)
	}
	caddyproc.MustFail(t, s.Textgen("code", "disable", "code_000000000000"), 1, "not found")
	caddyproc.MustFail(t, s.Textgen("code", "disable"), 2, "name the code")
	caddyproc.MustFail(t, s.Textgen("code", "disable", "a", "b"), 2)
	caddyproc.MustFail(t, s.Textgen("code", "redemptions", "code_000000000000", "--json"), 1, "not found")
	if v := s.JSON("ledger", "verify"); v["ok"] != true {
		t.Fatalf("ledger verify: %v", v)
	}
}

// TestCLICodesTwoInstances: two built servers on one PostgreSQL ledger; 20 accounts redeem a
// 5-use code over both at once: exactly 5 are credited.
func TestCLICodesTwoInstances(t *testing.T) {
	url := pgtest.NewDatabase(t)
	site := fmt.Sprintf("textgen {\n\t\tledger %s\n\t\tollama http://127.0.0.1:1\n\t\tauth_failure_limit off\n\t}", url)
	a, b := caddyproc.Start(t, site, url), caddyproc.Start(t, site, url)
	code := caddyproc.Str(t, a.JSON("code", "create", "--credits", "7", "--uses", "5"), "code")
	var keys []string
	for i := range 20 {
		acct := caddyproc.Str(t, b.JSON("account", "create", "--email", fmt.Sprintf("p%d@example.com", i), "--test-credits", "0"), "id")
		keys = append(keys, caddyproc.Str(t, a.JSON("key", "create", "--account", acct), "key"))
	}
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i, k := range keys {
		addr := []string{a.HTTP, b.HTTP}[i%2]
		wg.Go(func() {
			st, _ := redeemOver(t, addr, k, code)
			mu.Lock()
			statuses[st]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if statuses[200] != 5 || statuses[400] != 15 || len(statuses) != 2 {
		t.Fatalf("20 redemptions of a 5-use code over two instances: %v, want 5 × 200 and 15 × 400", statuses)
	}
	list := caddyproc.List(t, b.JSON("code", "list"), "codes")
	if len(list) != 1 || caddyproc.Num(t, list[0], "uses") != 5 {
		t.Fatalf("code list: %v", list)
	}
	if v := a.JSON("ledger", "verify"); v["ok"] != true {
		t.Fatalf("ledger verify: %v", v)
	}
}
