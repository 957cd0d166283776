package caddymodule

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestLedgerFrozenUnderLoad: PostgreSQL frozen (SIGSTOP) for longer than generation_timeout
// while requests arrive, then thawed. A request that waits for its hold waits for the ledger, so
// it ends as 503 ledger_unavailable (the ledger's timeout) or, held in the end, as a complete
// 200; never as 504 backend_timeout, "the model did not start answering in time", from a model
// that answers at once. Every 200 is charged once.
func TestLedgerFrozenUnderLoad(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pg := pgtest.Shared(t)
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "tok "})
	srv := caddyproc.Start(t, pgSite(url, fs.URL, "\t\tgeneration_timeout 2s\n\t\tqueue_timeout 2s\n\t\thold_ttl 10s\n"), url)
	acct := caddyproc.Str(t, srv.JSON("account", "create", "--email", "frozen@example.com"), "id")
	key := caddyproc.Str(t, srv.JSON("key", "create", "--account", acct), "key")
	srv.JSON("credits", "grant", "--account", acct, "--credits", "1000", "--reference", "frozen")

	client := &http.Client{Timeout: time.Minute}
	body := genBody("summarizer", "x", "en", "")
	var ok, unavailable, other atomic.Int64
	var firstOther atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				status, text, h, err := postTo(client, srv.HTTP, key, body)
				switch {
				case err == nil && status == 200 && text == "tok tok tok ":
					ok.Add(1)
				case err == nil && status == 503 && strings.Contains(text, "ledger_unavailable") && h.Get("X-Credits-Used") == "0":
					unavailable.Add(1)
				default:
					other.Add(1)
					firstOther.CompareAndSwap(nil, fmt.Sprintf("%d %q %v", status, text, err))
				}
			}
		}()
	}
	waitCount(t, "requests served before the freeze", func() bool { return ok.Load() > 50 })
	if err := pg.Freeze(); err != nil {
		t.Fatal(err)
	}
	// Frozen for 7 s: longer than generation_timeout (2 s) and than the ledger's query timeout
	// (5 s), as a stalled database host or a long checkpoint would be.
	time.Sleep(7 * time.Second)
	if err := pg.Thaw(); err != nil {
		t.Fatal(err)
	}
	served := ok.Load()
	waitCount(t, "requests served after the thaw", func() bool { return ok.Load() > served+50 })
	close(stop)
	wg.Wait()
	if other.Load() != 0 {
		t.Fatalf("%d answers neither 200 nor 503 ledger_unavailable while the ledger was frozen (first: %v)", other.Load(), firstOther.Load())
	}
	// A hold whose commit the frozen database took but never confirmed is not this request's
	// charge (it was answered 503): it expires (hold_ttl, 10 s) and is voided.
	var v, av int64
	waitCount(t, "every settle to be taken and every unconfirmed hold voided", func() bool {
		bal := srv.JSON("balance", "--account", acct)
		v, av = caddyproc.Num(t, bal, "balance"), caddyproc.Num(t, bal, "available")
		return v == av
	})
	if v != 1000-ok.Load() {
		t.Fatalf("balance %d after %d answers 200; want %d", v, ok.Load(), 1000-ok.Load())
	}
	if v := srv.JSON("ledger", "verify"); !caddyproc.Bool(t, v, "ok") {
		t.Fatalf("verify: %v", v)
	}
	t.Logf("%d served, %d answered ledger_unavailable", ok.Load(), unavailable.Load())
}
