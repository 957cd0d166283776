package binarytest

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestTwoInstancesResumeGeneration: two caddy processes share a PostgreSQL ledger and a
// retention_key. A client cut on one instance resumes on the other, while the generation still
// runs on the first: by request id (plain, with Range), by SSE with Last-Event-ID, and by an
// Idempotency-Key retry, charged once; the database holds neither the text nor the input in
// clear. The fault server paces the pieces so that the client leaves in the middle.
func TestTwoInstancesResumeGeneration(t *testing.T) {
	url := pgtest.NewDatabase(t)
	const pieces = 60
	fsrv := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: pieces, Piece: "Kestrel", Numbered: true, Delay: 20 * time.Millisecond})
	extra := "\t\tretention_key " + testRetentionKey + "\n"
	a := caddyproc.Start(t, pgSite(url, fsrv.URL, extra), url)
	b := caddyproc.Start(t, pgSite(url, fsrv.URL, extra), url)
	acct := caddyproc.Str(t, a.JSON("account", "create", "--email", "resume@example.com"), "id")
	key := caddyproc.Str(t, a.JSON("key", "create", "--account", acct), "key")
	a.JSON("credits", "grant", "--account", acct, "--credits", "3", "--reference", "resume")
	const phrase = "Pelican-Harpsichord-Tamarind 2024"
	body := genBody("summarizer", phrase, "en", "")
	full := numbered("Kestrel", pieces)

	// Cut on a after the second piece (the second is written only once the first was
	// delivered; leaving right after the first is the documented instant that may go uncharged,
	// and then nothing is kept).
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+a.HTTP+"/api/v1/generate", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Idempotency-Key", "cut-on-a")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, len("Kestrel0 Kestrel1 "))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	rid := resp.Header.Get("X-Request-Id")
	cancel()
	resp.Body.Close()

	get := func(addr string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/generations/"+rid, nil)
		req.Header.Set("X-API-Key", key)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading from %s: %v", addr, err)
		}
		return resp, string(data)
	}
	// On b, from where the client stopped, while a still generates: b follows the ledger.
	r, rest := get(b.HTTP, "Accept", "text/plain", "Range", "bytes=18-")
	if r.StatusCode != http.StatusPartialContent || string(first)+rest != full {
		t.Fatalf("resume on the other instance: %d %q %q", r.StatusCode, first, rest)
	}
	if fsrv.PiecesSent() != pieces {
		t.Fatalf("the model sent %d of %d pieces: the generation stopped with its client", fsrv.PiecesSent(), pieces)
	}
	// SSE from event 10 on, on b.
	r2, events := get(b.HTTP, "Accept", "text/event-stream", "Last-Event-ID", "10")
	if r2.StatusCode != http.StatusOK {
		t.Fatalf("SSE on b: %d %q", r2.StatusCode, events)
	}
	evs, err := readSSE(bufio.NewReader(strings.NewReader(events)))
	if err != nil || len(evs) != pieces-10+1 || evs[len(evs)-1].Name != "done" || !strings.Contains(events, "id: 11\n") || strings.Contains(events, "id: 10\n") {
		t.Fatalf("SSE resume on b: %d events %v: %q", len(evs), err, events)
	}
	// The Idempotency-Key retry on b gets the kept text, no charge.
	status, text, hdr, err := postTo(http.DefaultClient, b.HTTP, key, body, "Idempotency-Key", "cut-on-a")
	if err != nil || status != http.StatusOK || text != full || hdr.Get("Idempotent-Replayed") != "true" || hdr.Get("X-Credits-Used") != "0" {
		t.Fatalf("retry on b: %d %q %v %v", status, text, hdr, err)
	}
	bal := b.JSON("balance", "--account", acct)
	if caddyproc.Num(t, bal, "balance") != 2 || caddyproc.Num(t, bal, "available") != 2 {
		t.Fatalf("balance %v: want one charge", bal)
	}

	// Nothing of the text or the input is in the database in clear.
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, _ := conn.Query(context.Background(), `SELECT tablename FROM pg_tables WHERE schemaname = 'public'`)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var kept int
	for _, tab := range tables {
		rows, _ := conn.Query(context.Background(), `SELECT t::text FROM `+pgx.Identifier{tab}.Sanitize()+` t`)
		texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if tab == "generation_chunks" {
			kept = len(texts)
		}
		for _, x := range texts {
			if strings.Contains(x, "Kestrel") || strings.Contains(x, phrase) || strings.Contains(x, "4b657374726") { // "Kest" in hex (bytea)
				t.Errorf("table %s holds the text or the input in clear: %.200s", tab, x)
			}
		}
	}
	if kept == 0 {
		t.Fatal("no chunk was kept in the database")
	}
	if v := b.JSON("ledger", "verify"); !caddyproc.Bool(t, v, "ok") {
		t.Fatalf("verify: %v", v)
	}
}
