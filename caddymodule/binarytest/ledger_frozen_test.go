package binarytest

import (
	"testing"

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

	load := startLedgerLoad(srv.HTTP, key, 0)
	waitCount(t, "requests served before the freeze", func() bool { return load.ok.Load() > 50 })
	if err := pg.Freeze(); err != nil {
		t.Fatal(err)
	}
	// Frozen longer than generation_timeout (2 s) and than the ledger's query timeout (5 s), as
	// a stalled database host or a long checkpoint would be: until the clients have had eight
	// answers ledger_unavailable (one per client, on average), which a call to the frozen
	// database gets only when the query timeout ends it.
	before := load.unavailable.Load()
	waitCount(t, "answers ledger_unavailable while frozen", func() bool { return load.unavailable.Load() >= before+8 })
	if err := pg.Thaw(); err != nil {
		t.Fatal(err)
	}
	served := load.ok.Load()
	waitCount(t, "requests served after the thaw", func() bool { return load.ok.Load() > served+50 })
	load.end(t)
	// A hold whose commit the frozen database took but never confirmed is not this request's
	// charge (it was answered 503): it expires (hold_ttl, 10 s) and is voided.
	checkEveryOKCharged(t, srv, acct, load.ok.Load())
	t.Logf("%d served, %d answered ledger_unavailable", load.ok.Load(), load.unavailable.Load())
}
