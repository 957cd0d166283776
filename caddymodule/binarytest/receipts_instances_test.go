package binarytest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/caddymodule/internal/receipts"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestTwoInstancesSignWithOneKey: two caddy processes on one PostgreSQL ledger with one
// retention_key, asked for their key lists at once on a new ledger, publish the same single
// key; a generation charged on one has a receipt on the other that verifies with the first's
// list; `caddy textgen receipts rotate-key` on one makes the other sign with the new key, and
// the old receipt still verifies with either's list.
func TestTwoInstancesSignWithOneKey(t *testing.T) {
	url := pgtest.NewDatabase(t)
	extra := "\t\tretention_key " + testRetentionKey + "\n"
	a := caddyproc.Start(t, pgSite(url, modelServer(t), extra), url)
	b := caddyproc.Start(t, pgSite(url, modelServer(t), extra), url)
	acct := caddyproc.Str(t, a.JSON("account", "create", "--email", "receipts@example.com"), "id")
	key := caddyproc.Str(t, a.JSON("key", "create", "--account", acct), "key")
	a.JSON("credits", "grant", "--account", acct, "--credits", "3", "--reference", "receipts")

	try := func(addr, path, key string, v any) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusOK && json.Unmarshal(body, v) != nil {
			t.Fatalf("GET %s%s: %s", addr, path, body)
		}
		return resp.StatusCode, string(body)
	}
	get := func(addr, path, key string, v any) {
		t.Helper()
		if status, body := try(addr, path, key, v); status != http.StatusOK {
			t.Fatalf("GET %s%s: %d %s", addr, path, status, body)
		}
	}
	var sets [2]receipts.KeySet
	var wg sync.WaitGroup
	for i, s := range []*caddyproc.Server{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, "http://"+s.HTTP+receiptKeysPath, nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				json.NewDecoder(resp.Body).Decode(&sets[i])
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	if len(sets[0].Keys) != 1 || len(sets[1].Keys) != 1 || sets[0].Keys[0] != sets[1].Keys[0] {
		t.Fatalf("the instances publish %+v and %+v", sets[0], sets[1])
	}

	status, _, hdr, err := postTo(http.DefaultClient, a.HTTP, key, genBody("summarizer", "Two instances, one key.", "en", ""))
	if err != nil || status != http.StatusOK {
		t.Fatalf("generate on a: %d %v", status, err)
	}
	rid := hdr.Get("X-Request-Id")
	// The other instance has the receipt once the first has written the generation's end (it
	// does right after the response; until then the other answers 404).
	var old receipts.Signed
	waitFor(t, "the receipt on the other instance", func() bool {
		status, body := try(b.HTTP, generationsPath+rid+signedReceiptSuffix, key, &old)
		if status != http.StatusOK && status != http.StatusNotFound {
			t.Fatalf("the receipt on b: %d %s", status, body)
		}
		return status == http.StatusOK
	})
	if err := receipts.Verify(sets[0], old); err != nil || old.KeyID != sets[0].Keys[0].KeyID {
		t.Fatalf("b's receipt of a's generation with a's list: %s %v", old.KeyID, err)
	}

	rotated := b.JSON("receipts", "rotate-key")
	cur := caddyproc.Str(t, rotated, "current")
	if cur == old.KeyID {
		t.Fatalf("rotate-key: %v", rotated)
	}
	var fresh receipts.Signed
	get(a.HTTP, generationsPath+rid+signedReceiptSuffix, key, &fresh)
	var set receipts.KeySet
	get(a.HTTP, receiptKeysPath, "", &set)
	// The receipt is signed with the key whose listed period holds its time (the old key's,
	// unless the generation settled in the rotation's second).
	var g receipts.Generation
	if err := json.Unmarshal(fresh.Receipt, &g); err != nil {
		t.Fatal(err)
	}
	if fresh.KeyID != keyHolding(t, set, g.Time) || len(set.Keys) != 2 || set.Keys[1].KeyID != cur || !set.Keys[1].Current {
		t.Fatalf("a signs with %s after b's rotation to %s; a lists %+v", fresh.KeyID, cur, set)
	}
	for _, sr := range []receipts.Signed{old, fresh} {
		if err := receipts.Verify(set, sr); err != nil {
			t.Fatalf("%s with a's list after the rotation: %v", sr.KeyID, err)
		}
	}
	if listed := a.JSON("receipts", "keys"); caddyproc.Str(t, listed, "current") != cur {
		t.Fatalf("receipts keys on a: %v", listed)
	}
	// The CLI's usage by key: the one key, one charged summarizer request.
	byKey := caddyproc.List(t, b.JSON("usage", "--by-key", "--account", acct), "keys")
	if len(byKey) != 1 {
		t.Fatalf("usage --by-key: %v", byKey)
	}
	if row := byKey[0]; row["tool"] != "summarizer" || fmt.Sprint(row["settled"]) != "1" || row["key_id"] == "" || row["last4"] != key[len(key)-4:] {
		t.Fatalf("usage --by-key row: %v; the key ends in %q", row, key[len(key)-4:])
	}
}
