package binarytest

// Kept text and idempotency records while the database restarts: paid text is never lost within
// the retention window, and a charged request's key is never left "still running".

import (
	"context"
	"fmt"
	"io"
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

// TestKeptTextSurvivesDatabaseRestart: generations that end while PostgreSQL is stopped are
// charged once it is back (their settles are retried), and so is the writing of their kept
// text: once the database runs again, every charged generation's whole text can be fetched,
// from another instance too (so it is in the ledger, not only in the memory of the one that ran
// it). The model sends two pieces, then nothing for a few seconds, then ends: the database is
// stopped in between.
func TestKeptTextSurvivesDatabaseRestart(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pg := pgtest.Shared(t)
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultStall, Pieces: 2, Piece: "kept ", Stall: 4 * time.Second})
	site := pgSite(url, fs.URL, "\t\tretention_key "+testRetentionKey+"\n")
	a := caddyproc.Start(t, site, url)
	b := caddyproc.Start(t, site, url)
	acct := caddyproc.Str(t, a.JSON("account", "create", "--email", "kept-down@example.com"), "id")
	key := caddyproc.Str(t, a.JSON("key", "create", "--account", acct), "key")
	a.JSON("credits", "grant", "--account", acct, "--credits", "100", "--reference", "kept-down")

	const streams = 8
	client := &http.Client{Timeout: time.Minute}
	var ended atomic.Int64
	ids := make([]string, streams)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer ended.Add(1)
			status, text, h, err := postTo(client, a.HTTP, key, genBody("summarizer", "x", "en", ""))
			if err != nil || status != http.StatusOK || text != "kept kept " {
				t.Errorf("stream %d: %d %q %v", i, status, text, err)
				return
			}
			ids[i] = h.Get("X-Request-Id")
		}()
	}
	waitCount(t, "every stream's text to be sent", func() bool { return fs.PiecesSent() == 2*streams })
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := ended.Load(); n != 0 {
		t.Fatalf("%d streams ended before the database stopped: the test did not arrange what it tests", n)
	}
	wg.Wait() // the generations end while the database is down
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return
	}
	waitCount(t, "every settle to be taken", func() bool {
		bal := a.JSON("balance", "--account", acct)
		return caddyproc.Num(t, bal, "balance") == 100-streams && caddyproc.Num(t, bal, "available") == 100-streams
	})
	for _, id := range ids {
		waitCount(t, "the kept text of "+id+" on the other instance", func() bool {
			status, text := getKept(t, b.HTTP, key, id)
			if status == http.StatusOK && text != "kept kept " {
				t.Fatalf("kept text of %s: %q", id, text)
			}
			return status == http.StatusOK
		})
	}
}

// getKept reads a kept generation's text from the instance at addr, waiting at most a few
// seconds for one that still runs there.
func getKept(t *testing.T, addr, key, id string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/generations/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, ""
	}
	return resp.StatusCode, string(b)
}

// TestIdempotencyOutcomeSurvivesDatabaseRestart: an Idempotency-Key request whose generation
// ends while PostgreSQL is down (retention off, so no kept text answers for it) is charged once
// the database is back, and its idempotency record is finished then too: a retry of the same key
// and body is answered as a replay of the charged request, on this instance and the other, never
// 409 "still running" and never generated or charged again.
func TestIdempotencyOutcomeSurvivesDatabaseRestart(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pg := pgtest.Shared(t)
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultStall, Pieces: 2, Piece: "once ", Stall: 3 * time.Second})
	site := pgSite(url, fs.URL, "\t\tretention off\n")
	a := caddyproc.Start(t, site, url)
	b := caddyproc.Start(t, site, url)
	acct := caddyproc.Str(t, a.JSON("account", "create", "--email", "idem-down@example.com"), "id")
	key := caddyproc.Str(t, a.JSON("key", "create", "--account", acct), "key")
	a.JSON("credits", "grant", "--account", acct, "--credits", "10", "--reference", "idem-down")

	client := &http.Client{Timeout: time.Minute}
	body := genBody("summarizer", "x", "en", "")
	done := make(chan error, 1)
	go func() {
		status, text, _, err := postTo(client, a.HTTP, key, body, "Idempotency-Key", "order-77")
		if err == nil && (status != http.StatusOK || text != "once once ") {
			err = fmt.Errorf("first request: %d %q", status, text)
		}
		done <- err
	}()
	waitCount(t, "the first request's text to be sent", func() bool { return fs.PiecesSent() == 2 })
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil { // it ends while the database is down
		t.Fatal(err)
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	waitCount(t, "the settle to be taken", func() bool {
		bal := a.JSON("balance", "--account", acct)
		return caddyproc.Num(t, bal, "balance") == 9 && caddyproc.Num(t, bal, "available") == 9
	})
	for _, srv := range []*caddyproc.Server{a, b} {
		var status int
		var text string
		var h http.Header
		waitCount(t, "the retry to be answered as a replay", func() bool {
			var err error
			status, text, h, err = postTo(client, srv.HTTP, key, body, "Idempotency-Key", "order-77")
			if err != nil {
				t.Fatal(err)
			}
			return status != http.StatusConflict
		})
		if status != http.StatusOK || h.Get("Idempotent-Replayed") != "true" || h.Get("X-Credits-Used") != "0" ||
			!strings.Contains(text, `"idempotent_replay":true`) {
			t.Fatalf("retry: %d %v %s", status, h, text)
		}
	}
	if bal := a.JSON("balance", "--account", acct); caddyproc.Num(t, bal, "balance") != 9 {
		t.Fatalf("balance %v after the retries, want 9", bal)
	}
	if v := a.JSON("ledger", "verify"); !caddyproc.Bool(t, v, "ok") {
		t.Fatalf("verify: %v", v)
	}
}
