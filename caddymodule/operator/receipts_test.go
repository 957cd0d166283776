package operator

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/receipts"
	"github.com/caddy-textgen/textgen/caddymodule/internal/sealing"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// TestAdminReceiptKeys: without a handler that signs for the ledger the routes answer 409 and
// say why; with one, GET lists the keys and POST rotate-key makes a new current key while the
// old one stays listed with the end of its validity; a body is refused as on every route.
func TestAdminReceiptKeys(t *testing.T) {
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
	w, _ := adminDo(t, dir, http.MethodGet, "/textgen/receipts/keys", "")
	wantStatus(t, w, http.StatusConflict, "retention on")
	w, _ = adminDo(t, dir, http.MethodPost, "/textgen/receipts/rotate-key", "")
	wantStatus(t, w, http.StatusConflict, "retention on")
	if keys, _ := store.ReceiptKeys(context.Background()); len(keys) != 0 {
		t.Fatalf("a refused rotation made keys: %+v", keys)
	}

	// What the textgen handler registers when it starts with retention on.
	sl, err := sealing.New(bytes.Repeat([]byte{3}, 32))
	if err != nil {
		t.Fatal(err)
	}
	unreg := textgenapp.RegisterReceiptSigner(store, receipts.New(store, sl))
	defer unreg()
	w, obj := adminDo(t, dir, http.MethodGet, "/textgen/receipts/keys", "")
	wantStatus(t, w, http.StatusOK, `"current"`)
	first, _ := obj["current"].(string)
	if keys, _ := obj["keys"].([]any); len(keys) != 1 || first == "" {
		t.Fatalf("keys: %s", w.Body)
	}
	w, obj = adminDo(t, dir, http.MethodPost, "/textgen/receipts/rotate-key", "")
	wantStatus(t, w, http.StatusOK, `"valid_until"`)
	keys, _ := obj["keys"].([]any)
	cur, _ := obj["current"].(string)
	if len(keys) != 2 || cur == "" || cur == first {
		t.Fatalf("after the rotation: %s", w.Body)
	}
	old, _ := keys[0].(map[string]any)
	if old["key_id"] != first || old["current"] != false || old["valid_until"] == nil || bytes.Contains(w.Body.Bytes(), []byte("sealed")) {
		t.Fatalf("the old key after the rotation: %s", w.Body)
	}
	w, _ = adminDo(t, dir, http.MethodPost, "/textgen/receipts/rotate-key", `{"unknown": 1}`)
	wantStatus(t, w, http.StatusBadRequest, "unknown field")
	w, _ = adminDo(t, dir, http.MethodDelete, "/textgen/receipts/rotate-key", "")
	wantStatus(t, w, http.StatusMethodNotAllowed, "")
	wantAudit(t, store, "admin_api receipts.rotate-key  receipt signing key")
}
