package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// TestAdminUsageByKey: an account's use per key and tool, with the keys' names and last 4
// characters and never a key or its digest; an unknown account is 404, a bad time 400.
func TestAdminUsageByKey(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "ledger")
	ref, err := textgenapp.AcquireLedger(dir, badgerledger.Options{DisableSyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Release() })
	store, err := ref.Get()
	if err != nil {
		t.Fatal(err)
	}
	dir = ref.Key()
	acct, err := store.CreateAccount(ctx, "keys@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Grant(ctx, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 10}); err != nil {
		t.Fatal(err)
	}
	var keyIDs []string
	var full []string
	for _, name := range []string{"backend", "laptop"} {
		k, rec, err := store.CreateKey(ctx, acct.ID, ledger.Live, name, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		keyIDs, full = append(keyIDs, rec.ID), append(full, k)
	}
	for i, use := range []struct{ key, tool string }{{keyIDs[0], "summarizer"}, {keyIDs[0], "summarizer"}, {keyIDs[0], "translator"}, {keyIDs[1], "summarizer"}} {
		rid := "req_admin_" + string(rune('a'+i))
		if _, err := store.Hold(ctx, ledger.HoldRequest{AccountID: acct.ID, Mode: ledger.Live, RequestID: rid, KeyID: use.key, Tool: use.tool}); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Settle(ctx, acct.ID, rid); err != nil {
			t.Fatal(err)
		}
	}
	w, _ := adminDo(t, dir, http.MethodGet, "/textgen/accounts/"+acct.ID+"/usage/keys", "")
	wantStatus(t, w, http.StatusOK, `"keys"`)
	var rep keyUsageReport
	if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"backend/summarizer": 2, "backend/translator": 1, "laptop/summarizer": 1}
	if rep.AccountID != acct.ID || len(rep.Keys) != len(want) {
		t.Fatalf("report: %s", w.Body)
	}
	for _, k := range rep.Keys {
		if want[k.Name+"/"+k.Tool] != k.Settled || k.Requests != k.Settled || k.Last4 == "" || k.Mode != ledger.Live {
			t.Errorf("row %+v; want %v", k, want)
		}
	}
	for _, k := range full {
		if bytes.Contains(w.Body.Bytes(), []byte(k)) {
			t.Fatal("the report holds a full key")
		}
	}
	w, _ = adminDo(t, dir, http.MethodGet, "/textgen/accounts/acct_missing/usage/keys", "")
	wantStatus(t, w, http.StatusNotFound, "not found")
	w, _ = adminDo(t, dir, http.MethodGet, "/textgen/accounts/"+acct.ID+"/usage/keys?from=yesterday", "")
	wantStatus(t, w, http.StatusBadRequest, "from")
}
