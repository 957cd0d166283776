package caddymodule

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
)

// TestServerKilledMidStream kills the caddy process (SIGKILL) while generations stream, restarts
// it on the same ledger, and checks what customers and operators would check:
//   - every generation whose response ended cleanly is charged exactly once;
//   - every stream the kill cut ends with an error at the client (never a clean, short EOF) and
//     is charged nothing: its hold, if it reached the disk, is voided as expired;
//   - the holds expire after the hold_ttl of the handler that created them, although the ledger
//     was opened by My Account with the default and the restarted config has another one;
//   - the ledger verifies clean and the service keeps working.
//
// The backend is the fault server (a fake Ollama, named as such): the real tiny model cannot be
// held mid-stream on demand, and the kill must land while every one of these streams is open.
func TestServerKilledMidStream(t *testing.T) {
	fs := ollamatest.NewFaultServer(ollamatest.FaultConfig{Model: "fast", Pieces: 8, Numbered: true})
	defer fs.Close()
	// 1000 pieces 10 ms apart: ten seconds, far longer than the test keeps a stream open.
	fs.Set(ollamatest.FaultConfig{Model: "slow", Pieces: 1000, Numbered: true, Delay: 10 * time.Millisecond})

	dir := ledgerDir(t)
	const holdTTL = 6 * time.Second
	site := func(extra string) string {
		return fmt.Sprintf("textgen {\n\t\tledger %s\n\t\tollama %s\n\t\tmodel fast\n%s\t\ttool summarizer {\n\t\t\tmodel slow\n\t\t}\n\t}", dir, fs.URL, extra)
	}
	// My Account comes first in the route, so it opens the shared ledger, with the ledger's
	// default hold TTL (minutes): the generate handler's holds must carry its own hold_ttl.
	srv := caddyproc.Start(t, fmt.Sprintf("route {\n\ttextgen_account {\n\t\tledger %s\n\t}\n\t%s\n\t}", dir,
		site(fmt.Sprintf("\t\tgeneration_timeout 4s\n\t\tqueue_timeout 1s\n\t\thold_ttl %s\n\t\tmax_concurrent_per_account 20\n\t\tmax_in_flight 20\n", holdTTL))), dir)
	acct := caddyproc.Str(t, srv.JSON("account", "create", "--email", "kill@example.com"), "id")
	key := caddyproc.Str(t, srv.JSON("key", "create", "--account", acct, "--name", "kill"), "key")
	srv.JSON("credits", "grant", "--account", acct, "--credits", "100", "--reference", "kill-test")

	client := &http.Client{}
	send := func(addr, tool string) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/generate",
			strings.NewReader(genBody(tool, "Write something.", "en", "")))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", key)
		return client.Do(req)
	}

	// Five generations that end before the kill: charged, and durable before their ends.
	var done []string
	for range 5 {
		resp, err := send(srv.HTTP, "email-writer")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.HasSuffix(string(body), "tok 7 ") {
			t.Fatalf("fast generation: %d %q %v", resp.StatusCode, body, err)
		}
		done = append(done, resp.Header.Get("X-Request-Id"))
	}

	// Ten streams, each open with text on the wire when the process dies.
	const streams = 10
	started := time.Now()
	var (
		mu      sync.Mutex
		cut     []string
		endings []error
		firsts  sync.WaitGroup
		ends    sync.WaitGroup
	)
	for range streams {
		firsts.Add(1)
		ends.Add(1)
		go func() {
			defer ends.Done()
			resp, err := send(srv.HTTP, "summarizer")
			if err != nil || resp.StatusCode != http.StatusOK {
				firsts.Done()
				mu.Lock()
				endings = append(endings, fmt.Errorf("slow generation did not start: %v %v", resp, err))
				mu.Unlock()
				return
			}
			defer resp.Body.Close()
			first := make([]byte, 4)
			_, ferr := io.ReadFull(resp.Body, first)
			firsts.Done()
			rest, err := io.ReadAll(resp.Body)
			if ferr != nil {
				err = ferr
			}
			mu.Lock()
			defer mu.Unlock()
			cut = append(cut, resp.Header.Get("X-Request-Id"))
			if err == nil {
				err = fmt.Errorf("a cut stream ended cleanly after %d bytes: %q", len(first)+len(rest), bytes.TrimSpace(rest))
			} else if !errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("a cut stream ended with %v, want an unexpected EOF", err)
			} else {
				err = nil
			}
			endings = append(endings, err)
		}()
	}
	firsts.Wait()
	srv.Kill()
	ends.Wait()
	if len(cut) != streams {
		t.Fatalf("%d of %d streams were open at the kill: %v", len(cut), streams, endings)
	}
	for _, err := range endings {
		if err != nil {
			t.Error(err)
		}
	}

	// Restart after the killed holds' own TTL has passed, with the default hold_ttl (minutes):
	// Open must void them by the TTL they were created with.
	time.Sleep(time.Until(started.Add(holdTTL + time.Second)))
	srv = caddyproc.Start(t, site(""), dir)
	if v := srv.JSON("ledger", "verify"); !caddyproc.Bool(t, v, "ok") {
		t.Fatalf("ledger verify after the kill: %v", v)
	}
	bal := srv.JSON("balance", "--account", acct)
	if b, a := caddyproc.Num(t, bal, "balance"), caddyproc.Num(t, bal, "available"); b != 100-5 || a != b {
		t.Fatalf("after the kill: balance %d, available %d; want 95 and 95 (the five finished generations charged, nothing held)", b, a)
	}
	settled := map[string]int{}
	voided := map[string]int{}
	h := srv.JSON("history", "--account", acct, "--limit", "1000")
	for _, e := range caddyproc.List(t, h, "entries") {
		rid, _ := e["request_id"].(string)
		switch e["kind"] {
		case "settle":
			settled[rid]++
		case "void":
			voided[rid]++
			if e["reason"] != "expired" {
				t.Errorf("void of %s: reason %v, want expired", rid, e["reason"])
			}
		}
	}
	for _, rid := range done {
		if settled[rid] != 1 {
			t.Errorf("finished generation %s settled %d times, want once", rid, settled[rid])
		}
	}
	for _, rid := range cut {
		if settled[rid] != 0 || voided[rid] > 1 {
			t.Errorf("cut stream %s: settled %d, voided %d times; want 0 and at most 1", rid, settled[rid], voided[rid])
		}
	}
	if len(settled) != len(done) {
		t.Errorf("settled request ids %v, want exactly %v", settled, done)
	}
	for rid := range voided {
		if !slices.Contains(cut, rid) {
			t.Errorf("voided %s, which is not a cut stream", rid)
		}
	}
	// The holds' own TTL is proven only by a hold that reached the disk before the kill. Ten
	// streams with text on the wire make that all but certain (each hold's write commits
	// within a disk sync); none would mean the test proved nothing about it.
	if len(voided) == 0 {
		t.Fatal("no hold of a cut stream had reached the disk: the hold_ttl check was not exercised")
	}
	t.Logf("%d cut streams: %d holds had reached the disk and were voided as expired at restart", len(cut), len(voided))

	// The restarted service charges as before.
	resp, err := send(srv.HTTP, "email-writer")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Credits-Remaining") != "94" {
		t.Fatalf("after restart: %d, X-Credits-Remaining %q; want 200 and 94", resp.StatusCode, resp.Header.Get("X-Credits-Remaining"))
	}
}
