package binarytest

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
//     is charged nothing: its hold, if it reached the disk, is voided at the restart ("restart"),
//     at once, although its hold_ttl (20 minutes) is far from over;
//   - an Idempotency-Key the killed process left "in progress" is free at once: the retry runs
//     (no 409 for the rest of the hold_ttl) and is charged once;
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
	const holdTTL = 20 * time.Minute
	site := func(extra, summarizerModel string) string {
		return fmt.Sprintf("textgen {\n\t\tledger %s\n\t\tollama %s\n\t\tmodel fast\n%s\t\ttool summarizer {\n\t\t\tmodel %s\n\t\t}\n\t}", dir, fs.URL, extra, summarizerModel)
	}
	// My Account shares the ledger in the same route, as a real site would.
	srv := caddyproc.Start(t, fmt.Sprintf("route {\n\ttextgen_account {\n\t\tledger %s\n\t}\n\t%s\n\t}", dir,
		site(fmt.Sprintf("\t\tgeneration_timeout 4s\n\t\tqueue_timeout 1s\n\t\thold_ttl %s\n\t\tmax_concurrent_per_account 20\n\t\tmax_in_flight 20\n", holdTTL), "slow")), dir)
	acct := caddyproc.Str(t, srv.JSON("account", "create", "--email", "kill@example.com"), "id")
	key := caddyproc.Str(t, srv.JSON("key", "create", "--account", acct, "--name", "kill"), "key")
	srv.JSON("credits", "grant", "--account", acct, "--credits", "100", "--reference", "kill-test")

	client := &http.Client{}
	send := func(addr, tool string, idem ...string) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/generate",
			strings.NewReader(genBody(tool, "Write something.", "en", "")))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", key)
		if len(idem) > 0 {
			req.Header.Set("Idempotency-Key", idem[0])
		}
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

	// Ten streams, each open with text on the wire when the process dies, each with an
	// Idempotency-Key.
	const streams = 10
	var (
		mu      sync.Mutex
		cut     []string
		endings []error
		firsts  sync.WaitGroup
		ends    sync.WaitGroup
	)
	for i := range streams {
		firsts.Add(1)
		ends.Add(1)
		go func() {
			defer ends.Done()
			resp, err := send(srv.HTTP, "summarizer", fmt.Sprint("cut-", i))
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
	// A hold is written lazily, in the group commit of whatever follows it (at the latest 20 ms
	// after its reservation, a timer that may run late on a loaded machine). The ledger commits
	// in queue order, so a write that returns once durable (creating an account, through the
	// running process) brings every hold reserved before it to the disk: the voids at restart
	// below are then exercised for every open stream, without a pause that only made it likely.
	srv.JSON("account", "create", "--email", "after-the-holds@example.com")
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

	// Restart at once, the summarizer now on the fast model (so a retry completes): Open voids
	// the killed process's holds without waiting for their hold_ttl.
	srv = caddyproc.Start(t, site("", "fast"), dir)
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
			if e["reason"] != "restart" {
				t.Errorf("void of %s: reason %v, want restart", rid, e["reason"])
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
	// Every cut stream's hold had reached the disk before the kill (the durable write above):
	// each is voided at restart.
	if len(voided) != len(cut) {
		t.Fatalf("%d of %d cut streams voided at restart; want all (their holds were on disk)", len(voided), len(cut))
	}
	t.Logf("%d cut streams: %d holds had reached the disk and were voided at restart", len(cut), len(voided))

	// A retry of a cut stream with its Idempotency-Key runs now, not after the hold_ttl, and is
	// charged once.
	resp, err := send(srv.HTTP, "summarizer", "cut-0")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "" || !strings.HasSuffix(string(body), "tok 7 ") ||
		resp.Header.Get("X-Credits-Remaining") != "94" {
		t.Fatalf("retry of a cut stream after the restart: %d %q, X-Credits-Remaining %q; want 200, the text and 94",
			resp.StatusCode, body, resp.Header.Get("X-Credits-Remaining"))
	}

	// The restarted service charges as before.
	resp, err = send(srv.HTTP, "email-writer")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Credits-Remaining") != "93" {
		t.Fatalf("after restart: %d, X-Credits-Remaining %q; want 200 and 93", resp.StatusCode, resp.Header.Get("X-Credits-Remaining"))
	}
}
