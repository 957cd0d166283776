package binarytest

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/pgledger"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestSettleAfterDatabaseDownPastHoldTTL: generations whose whole text reached their clients
// while PostgreSQL was stopped for longer than hold_ttl are charged exactly once when it is back,
// although the sweeps of two instances find their holds expired first and void them: the settle
// carries the moment it was decided, before the expiry, and the ledger turns the void into a
// charge. The model sends one piece, waits a second, and ends; the database stops after every
// stream's first piece, so each settle is decided while the database is down.
func TestSettleAfterDatabaseDownPastHoldTTL(t *testing.T) {
	const streams, holdTTL = 6, 3 * time.Second
	url := pgtest.NewDatabase(t)
	pg := pgtest.Shared(t)
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultStall, Pieces: 1, Piece: "paid ", Stall: time.Second})
	site := pgSite(url, fs.URL, "\t\tretention off\n\t\thold_ttl 3s\n\t\tgeneration_timeout 2s\n\t\tqueue_timeout 500ms\n")
	a := caddyproc.Start(t, site, url)
	caddyproc.Start(t, site, url) // a second instance: its sweep voids a's expired holds too
	acct := caddyproc.Str(t, a.JSON("account", "create", "--email", "late@example.com"), "id")
	key := caddyproc.Str(t, a.JSON("key", "create", "--account", acct), "key")
	a.JSON("credits", "grant", "--account", acct, "--credits", "100", "--reference", "late")

	client := &http.Client{Timeout: time.Minute}
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, text, _, err := postTo(client, a.HTTP, key, genBody("summarizer", "x", "en", ""))
			if err != nil || status != http.StatusOK || text != "paid " {
				t.Errorf("stream %d: %d %q %v", i, status, text, err)
			}
		}()
	}
	waitCount(t, "every stream's first piece", func() bool { return fs.PiecesSent() == streams })
	stopped := time.Now()
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	wg.Wait() // every client has its whole text; the settles wait for the database
	// Down past every hold's expiry (each was taken before the stop), and long enough that the
	// settles' retries pause for seconds: the sweeps, every hold_ttl/4, find the holds first.
	waitCount(t, "the holds' expiry to pass", func() bool { return time.Since(stopped) > holdTTL+2*time.Second })
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return
	}
	waitCount(t, "every hold to be resolved", func() bool {
		bal := a.JSON("balance", "--account", acct)
		return caddyproc.Num(t, bal, "balance") == caddyproc.Num(t, bal, "available")
	})
	// The charges wait for their retries, seconds apart: read the history once they are all in.
	s, err := pgledger.OpenPostgres(context.Background(), url, pgledger.PostgresOptions{SweepInterval: -1, LastUsedFlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	settles := map[string]int{}
	voids := 0
	waitCount(t, "every delivered generation to be charged", func() bool {
		settles, voids = map[string]int{}, 0
		var p ledger.Page
		for {
			es, next, err := s.History(context.Background(), acct, p)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				switch {
				case e.Kind == ledger.KindSettle:
					settles[e.RequestID]++
				case e.Kind == ledger.KindVoid && e.Reason == "expired":
					voids++
				}
			}
			if next == "" {
				break
			}
			p.Cursor = next
		}
		return len(settles) >= streams
	})
	for rid, n := range settles {
		if n != 1 {
			t.Errorf("request %s charged %d times", rid, n)
		}
	}
	if voids == 0 {
		t.Fatal("no hold was voided as expired: the test did not arrange what it tests")
	}
	if bal := a.JSON("balance", "--account", acct); caddyproc.Num(t, bal, "balance") != 100-streams {
		t.Fatalf("balance %v after %d delivered generations", bal, streams)
	}
	if v := a.JSON("ledger", "verify"); !caddyproc.Bool(t, v, "ok") {
		t.Fatalf("verify: %v", v)
	}
	t.Logf("%d holds voided as expired, then charged", voids)
}
