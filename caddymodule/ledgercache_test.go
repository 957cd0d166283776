package caddymodule

import (
	"io"
	"testing"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// ledger_cache_accounts sizes the Badger ledger's account cache: with room for 2 accounts, the
// accounts of 6 customers' requests are read in and let go again, and every request is answered.
func TestLedgerCacheAccounts(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 1})
	e := newEnv(t, envOptions{ollama: fs.URL, extra: "ledger_cache_accounts 2"})
	store, ok := e.store.(*badgerledger.Badger)
	if !ok {
		t.Fatalf("the ledger is a %T, not Badger", e.store)
	}
	var keys []string
	for range 6 {
		_, key := e.account(5)
		keys = append(keys, key)
	}
	for round := range 2 {
		for _, key := range keys {
			resp := e.get("/api/v1/balance", key)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("round %d: balance answered %d", round, resp.StatusCode)
			}
		}
	}
	st := store.CacheStats()
	if st.Evictions == 0 || st.Accounts > 2 {
		t.Fatalf("with ledger_cache_accounts 2, the cache holds %d accounts after %d evictions", st.Accounts, st.Evictions)
	}
}
