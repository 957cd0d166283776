package caddymodule

// Kept generations through the real Caddy runtime and Badger on disk: the real
// Ollama (fixed seed) where the text itself matters, the fault server where a stream must be
// paced so that a client can leave in its middle.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/ledger"
)

// testRetentionKey is the retention_key of these tests (32 bytes, base64).
var testRetentionKey = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))

// get sends a GET with the key (X-API-Key) and headers.
func (e *env) getWith(ctx context.Context, key, path string, hdr ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+path, nil)
	if err != nil {
		return nil, err
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return e.client.Do(req)
}

// getText reads a whole answer and fails the test on a transport error.
func (e *env) getText(key, path string, hdr ...string) (*http.Response, string) {
	e.t.Helper()
	resp, err := e.getWith(context.Background(), key, path, hdr...)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("GET %s: reading the body: %v (after %q)", path, err, b)
	}
	return resp, string(b)
}

// cutAfter sends a generate request and leaves once n bytes (plain) have arrived; it returns
// what arrived and the request id.
func (e *env) cutAfter(key, body string, n int, hdr ...string) (got, reqID string) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := e.post(ctx, key, body, hdr...)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("status %d", resp.StatusCode)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		e.t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	return string(buf), resp.Header.Get("X-Request-Id")
}

// wantNotFound checks a JSON 404 not_found in the error format of docs/API.md ("Errors").
func wantNotFound(t *testing.T, what string, resp *http.Response, body string) {
	t.Helper()
	var b apiErrBody
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" ||
		json.Unmarshal([]byte(body), &b) != nil || b.Error.Code != "not_found" || b.Error.RequestID == "" ||
		b.Error.RequestID != resp.Header.Get("X-Request-Id") || resp.Header.Get("X-Credits-Used") != "0" {
		t.Errorf("%s: %d %s %q, want a JSON 404 not_found", what, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}

// numbered is what the fault server streams in n numbered pieces of piece.
func numbered(piece string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s%d ", piece, i)
	}
	return b.String()
}

// TestRetentionCutStreamRealOllama: a cut stream against the real model with a fixed seed.
// A client that leaves after the first piece is charged once, and gets the whole text by request
// id (plain, and resumed with Range) and by an Idempotency-Key retry, without a second charge;
// that text is the one an uninterrupted generation with the same seed produces.
func TestRetentionCutStreamRealOllama(t *testing.T) {
	o := realOllama(t)
	// The relay counts the connections to Ollama the plugin closed: a generation stopped with its
	// client would close one (TestGenerateDisconnectRealOllama), one that runs to its end does not.
	relay, err := ollamatest.NewRelay(o.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(relay.Close)
	e := newEnv(t, envOptions{ollama: relay.URL, extra: "seed 42\n\t\tmax_output_tokens 300\n\t\tretention 15m\n\t\tretention_key " + testRetentionKey})
	acct, key := e.account(5)
	const phrase = "Quokka-Zeppelin-Marmalade 4711: summarise the minutes of the harbour board."
	body := genBody("summarizer", phrase, "en", "")

	resp, err := e.post(context.Background(), key, body)
	if err != nil {
		t.Fatal(err)
	}
	full, _ := checkStreamed(t, resp, "4")
	if len(full) < 20 {
		t.Fatalf("the uninterrupted generation is too short to cut: %q", full)
	}

	closedBefore := relay.ClientClosed()
	// 20 bytes: past the first piece (a token), so past the documented instant of the first
	// flush, which a client leaving within the first piece may hit and go uncharged (unkept).
	first, rid := e.cutAfter(key, body, 20, "Idempotency-Key", "drop-1")
	// The generation runs on without its client: its whole text is there by request id,
	// streamed while it runs.
	r, text := e.getText(key, "/api/v1/generations/"+rid, "Accept", "text/plain")
	if r.StatusCode != http.StatusOK || r.Header.Get("X-Credits-Used") != "0" || r.Header.Get("X-Generation-Id") != rid {
		t.Fatalf("GET by id: %d %v", r.StatusCode, r.Header)
	}
	if text != full {
		t.Fatalf("the kept text is not what an uninterrupted generation with the same seed gives:\nkept %q\nfull %q", text, full)
	}
	if !strings.HasPrefix(full, first) {
		t.Fatalf("the client got %q, not a beginning of %q", first, full)
	}
	waitFor(t, "the cut generation to settle", func() bool { return e.balance(acct.ID).Balance == 3 })
	if n := relay.ClientClosed() - closedBefore; n != 0 {
		t.Fatalf("the plugin closed %d connections to Ollama: the generation stopped with its client", n)
	}

	// The same Idempotency-Key gives the kept text again, charges nothing, and says so.
	resp, err = e.post(context.Background(), key, body, "Idempotency-Key", "drop-1")
	if err != nil {
		t.Fatal(err)
	}
	replayed, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "true" || resp.Header.Get("X-Credits-Used") != "0" ||
		resp.Header.Get("X-Generation-Id") != rid || resp.Header.Get("X-Generation-State") != "completed" || string(replayed) != full {
		t.Fatalf("Idempotency-Key replay: %d %v %q", resp.StatusCode, resp.Header, replayed)
	}

	// Resume where the client stopped.
	r, rest := e.getText(key, "/api/v1/generations/"+rid, "Accept", "text/plain", "Range", fmt.Sprintf("bytes=%d-", len(first)))
	want := fmt.Sprintf("bytes %d-%d/%d", len(first), len(full)-1, len(full))
	if r.StatusCode != http.StatusPartialContent || r.Header.Get("Content-Range") != want || first+rest != full {
		t.Fatalf("Range resume: %d %q %q, want 206 %q and the rest", r.StatusCode, r.Header.Get("Content-Range"), rest, want)
	}
	r, bad := e.getText(key, "/api/v1/generations/"+rid, "Accept", "text/plain", "Range", fmt.Sprintf("bytes=%d-", len(full)))
	if r.StatusCode != http.StatusRequestedRangeNotSatisfiable || r.Header.Get("Content-Type") != "application/json" ||
		r.Header.Get("Content-Range") != fmt.Sprintf("bytes */%d", len(full)) || !strings.Contains(bad, `"range_not_satisfiable"`) {
		t.Fatalf("Range past the end: %d %v %q", r.StatusCode, r.Header, bad)
	}
	r, bad = e.getText(key, "/api/v1/generations/"+rid, "Accept", "text/plain", "Range", "bytes=0-5")
	if r.StatusCode != http.StatusRequestedRangeNotSatisfiable || !strings.Contains(bad, `"range_not_satisfiable"`) {
		t.Fatalf("a closed range: %d %q", r.StatusCode, bad)
	}

	// The receipt.
	r, doc := e.getText(key, "/api/v1/generations/"+rid)
	var rc receipt
	if err := json.Unmarshal([]byte(doc), &rc); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("receipt: %d %q %v", r.StatusCode, doc, err)
	}
	if rc.RequestID != rid || rc.Tool != "summarizer" || rc.Language != "en" || rc.Status != "settled" || rc.Credits != 1 ||
		!rc.Completed || rc.State != "completed" || rc.Text != full || rc.OutputTokens != 300 || rc.Finished == nil ||
		rc.Created.IsZero() || rc.Finished.Before(rc.Created) || rc.Bytes != int64(len(full)) {
		t.Fatalf("receipt %+v", rc)
	}

	// One charge for each of the two generations, none for the reads and the replay.
	if s, h, v := e.count(acct.ID, ledger.KindSettle), e.count(acct.ID, ledger.KindHold), e.count(acct.ID, ledger.KindVoid); s != 2 || h != 2 || v != 0 {
		t.Fatalf("%d settles, %d holds, %d voids; want 2, 2, 0", s, h, v)
	}
	if b := e.balance(acct.ID); b.Balance != 3 || b.Available != 3 {
		t.Fatalf("balance %+v", b)
	}

	// Neither the text nor the input is in the ledger's directory in clear.
	assertNotInDir(t, e.dir, phrase, full[:min(len(full), 40)])

	// Another account's key, an unknown id and a garbage id: 404.
	_, other := e.account(1)
	r, doc = e.getText(other, "/api/v1/generations/"+rid)
	wantNotFound(t, "another account's key", r, doc)
	r, doc = e.getText(key, "/api/v1/generations/req_0000000000000000000000")
	wantNotFound(t, "an unknown id", r, doc)
	r, doc = e.getText(key, "/api/v1/generations/x'%3B%20DROP%20TABLE%20holds")
	wantNotFound(t, "a garbage id", r, doc)
	r, doc = e.getText(key, "/api/v1/generations/")
	wantNotFound(t, "no id", r, doc)
	r, doc = e.getText("", "/api/v1/generations/"+rid)
	if r.StatusCode != http.StatusUnauthorized || !strings.Contains(doc, "missing_api_key") {
		t.Fatalf("no key: %d %q", r.StatusCode, doc)
	}
	e.verify()
}

// assertNotInDir fails if any file under dir holds one of secrets.
func assertNotInDir(t *testing.T, dir string, secrets ...string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, s := range secrets {
			if bytes.Contains(data, []byte(s)) {
				t.Errorf("%s holds %q in clear", path, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sseReader reads server-sent events one at a time.
type sseReader struct{ sc *bufio.Scanner }

type idEvent struct {
	id   int
	name string
	data string
}

func (r *sseReader) next() (idEvent, error) {
	var ev idEvent
	ev.id = -1
	for r.sc.Scan() {
		line := r.sc.Text()
		switch {
		case line == "":
			if ev.name != "" {
				return ev, nil
			}
		case strings.HasPrefix(line, "id: "):
			n, err := strconv.Atoi(strings.TrimPrefix(line, "id: "))
			if err != nil {
				return ev, err
			}
			ev.id = n
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data += strings.TrimPrefix(line, "data: ")
		}
	}
	if err := r.sc.Err(); err != nil {
		return ev, err
	}
	return ev, io.EOF
}

func deltaText(t *testing.T, ev idEvent) string {
	t.Helper()
	var d struct{ Text string }
	if err := json.Unmarshal([]byte(ev.data), &d); err != nil {
		t.Fatalf("delta %q: %v", ev.data, err)
	}
	return d.Text
}

// TestRetentionSSEResume: a client of the SSE stream that leaves after 5 events is charged
// once and resumes with Last-Event-ID: it gets exactly the missing events, none twice, then done.
// The fault server paces the pieces so that the client leaves in the middle.
func TestRetentionSSEResume(t *testing.T) {
	const pieces = 40
	fsrv := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: pieces, Piece: "w", Numbered: true, Delay: 20 * time.Millisecond})
	e := newEnv(t, envOptions{ollama: fsrv.URL, extra: "retention_key " + testRetentionKey})
	acct, key := e.account(2)
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := e.post(ctx, key, genBody("summarizer", "x", "en", ""), "Accept", "text/event-stream")
	if err != nil {
		t.Fatal(err)
	}
	rid := resp.Header.Get("X-Request-Id")
	rd := &sseReader{sc: bufio.NewScanner(resp.Body)}
	var got strings.Builder
	for i := 1; i <= 5; i++ {
		ev, err := rd.next()
		if err != nil || ev.name != "delta" || ev.id != i {
			t.Fatalf("event %d: %+v %v", i, ev, err)
		}
		got.WriteString(deltaText(t, ev))
	}
	cancel()
	resp.Body.Close()

	// Another account's key gets 404 while the generation runs (kept in memory here).
	_, otherKey := e.account(1)
	ro, doc := e.getText(otherKey, "/api/v1/generations/"+rid, "Accept", "text/plain")
	wantNotFound(t, "another account's key while it runs", ro, doc)

	// Resume after event 5, while the generation still runs without its client.
	r, err := e.getWith(context.Background(), key, "/api/v1/generations/"+rid, "Accept", "text/event-stream", "Last-Event-ID", "5")
	if err != nil {
		t.Fatal(err)
	}
	if r.StatusCode != http.StatusOK || r.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("resume: %d %v", r.StatusCode, r.Header)
	}
	rd = &sseReader{sc: bufio.NewScanner(r.Body)}
	want := 6
	var done idEvent
	for {
		ev, err := rd.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.name == "done" {
			done = ev
			continue
		}
		if ev.name != "delta" || ev.id != want {
			t.Fatalf("resumed event %+v, want delta %d", ev, want)
		}
		want++
		got.WriteString(deltaText(t, ev))
	}
	r.Body.Close()
	if want != pieces+1 || done.id != pieces+1 || !strings.Contains(done.data, `"credits_used":0`) || !strings.Contains(done.data, rid) {
		t.Fatalf("resume ended at %d with done %+v", want, done)
	}
	if got.String() != numbered("w", pieces) {
		t.Fatalf("first part and resumed part: %q", got.String())
	}
	// The client left after 5 of 40 paced pieces: all 40 were generated all the same.
	if fsrv.PiecesSent() != pieces || fsrv.ClientGone() != 0 {
		t.Fatalf("the model sent %d pieces (client gone %d): the generation stopped with its client", fsrv.PiecesSent(), fsrv.ClientGone())
	}

	// Resuming after the last event sends nothing more; past it, 416; garbage, 400.
	r2, rest := e.getText(key, "/api/v1/generations/"+rid, "Accept", "text/event-stream", "Last-Event-ID", strconv.Itoa(pieces+1))
	if r2.StatusCode != http.StatusOK || rest != "" {
		t.Fatalf("after the done event: %d %q", r2.StatusCode, rest)
	}
	r2, rest = e.getText(key, "/api/v1/generations/"+rid, "Accept", "text/event-stream", "Last-Event-ID", strconv.Itoa(pieces+2))
	if r2.StatusCode != http.StatusRequestedRangeNotSatisfiable || !strings.Contains(rest, `"range_not_satisfiable"`) {
		t.Fatalf("past the done event: %d %q", r2.StatusCode, rest)
	}
	r2, rest = e.getText(key, "/api/v1/generations/"+rid, "Accept", "text/event-stream", "Last-Event-ID", "abc")
	if r2.StatusCode != http.StatusBadRequest || !strings.Contains(rest, `"Last-Event-ID"`) {
		t.Fatalf("a garbage Last-Event-ID: %d %q", r2.StatusCode, rest)
	}

	waitFor(t, "the charge to settle", func() bool { return e.balance(acct.ID).Balance == 1 })
	if s, v := e.count(acct.ID, ledger.KindSettle), e.count(acct.ID, ledger.KindVoid); s != 1 || v != 0 {
		t.Fatalf("%d settles, %d voids", s, v)
	}
	e.verify()
}

// TestRetentionWindowEnds: within the window the text is kept but never in clear on disk; when
// the window ends the generation is 404 (by id and for a replay, which answers as before), and
// a generation that delivered nothing, or broke while its client was there, keeps nothing.
func TestRetentionWindowEnds(t *testing.T) {
	const secret = "Zebrafinch"
	fsrv := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 6, Piece: secret, Numbered: true, Delay: 5 * time.Millisecond})
	e := newEnv(t, envOptions{ollama: fsrv.URL, extra: "retention 2s\n\t\tretention_key " + testRetentionKey})
	acct, key := e.account(5)
	const phrase = "Walrus-Trombone-Saffron 0815"
	body := genBody("summarizer", phrase, "en", "")
	resp, err := e.post(context.Background(), key, body, "Idempotency-Key", "win-1")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := checkStreamed(t, resp, "4")
	rid := resp.Header.Get("X-Request-Id")
	if text != numbered(secret, 6) {
		t.Fatalf("text %q", text)
	}
	r, kept := e.getText(key, "/api/v1/generations/"+rid, "Accept", "text/plain")
	if r.StatusCode != http.StatusOK || kept != text {
		t.Fatalf("within the window: %d %q", r.StatusCode, kept)
	}
	assertNotInDir(t, e.dir, secret, phrase)
	// The first request has ended (its Idempotency-Key record says 200): a retry within the
	// window gets the kept text, as SSE since it asks so, and no charge.
	resp, err = e.post(context.Background(), key, body, "Idempotency-Key", "win-1", "Accept", "text/event-stream")
	if err != nil {
		t.Fatal(err)
	}
	evs, err := readSSE(resp.Body)
	resp.Body.Close()
	var replayed strings.Builder
	for _, ev := range evs {
		if ev.name == "delta" {
			var d struct{ Text string }
			json.Unmarshal([]byte(ev.data), &d)
			replayed.WriteString(d.Text)
		}
	}
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "true" || resp.Header.Get("X-Generation-Id") != rid ||
		replayed.String() != text || len(evs) != 7 || evs[6].name != "done" || !strings.Contains(evs[6].data, `"credits_used":0`) {
		t.Fatalf("replay within the window: %d %v %+v %v", resp.StatusCode, resp.Header, evs, err)
	}
	if s, h := e.count(acct.ID, ledger.KindSettle), e.count(acct.ID, ledger.KindHold); s != 1 || h != 1 {
		t.Fatalf("%d settles, %d holds after the replay; want 1, 1", s, h)
	}

	waitFor(t, "the window to end", func() bool {
		r, _ := e.getText(key, "/api/v1/generations/"+rid)
		return r.StatusCode == http.StatusNotFound
	})
	r, doc := e.getText(key, "/api/v1/generations/"+rid, "Accept", "text/plain")
	wantNotFound(t, "an expired window", r, doc)
	if n, err := e.store.DeleteExpiredGenerations(context.Background()); err != nil {
		t.Fatal(err)
	} else if _, _, err := e.store.GetGeneration(context.Background(), acct.ID, rid, 0); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("after the sweep (%d): %v", n, err)
	}
	assertNotInDir(t, e.dir, secret, phrase)
	// After the window a replay answers as without retention: the first status, no text.
	resp, err = e.post(context.Background(), key, body, "Idempotency-Key", "win-1")
	if err != nil {
		t.Fatal(err)
	}
	replay, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(replay), `"idempotent_replay":true`) {
		t.Fatalf("replay after the window: %d %q", resp.StatusCode, replay)
	}

	// A generation that breaks while its client is there is voided and keeps nothing.
	fsrv.Set(ollamatest.FaultConfig{Mode: ollamatest.FaultErrorAfter, Pieces: 3, Piece: secret, Delay: 5 * time.Millisecond})
	resp, err = e.post(context.Background(), key, body)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	broken := resp.Header.Get("X-Request-Id")
	waitFor(t, "the void", func() bool { return e.count(acct.ID, ledger.KindVoid) == 1 })
	r, doc = e.getText(key, "/api/v1/generations/"+broken)
	wantNotFound(t, "a voided generation", r, doc)
	if _, _, err := e.store.GetGeneration(context.Background(), acct.ID, broken, 0); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a voided generation is kept: %v", err)
	}
	e.verify()
}

// TestRetentionOff: with retention off nothing is kept, a replay
// answers with the first status only, and the endpoint answers 404.
func TestRetentionOff(t *testing.T) {
	fsrv := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 4, Piece: "p", Numbered: true})
	e := newEnv(t, envOptions{ollama: fsrv.URL, extra: "retention off"})
	acct, key := e.account(2)
	resp, err := e.post(context.Background(), key, genBody("summarizer", "x", "en", ""), "Accept", "text/event-stream", "Idempotency-Key", "off-1")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(raw), "id: ") {
		t.Fatalf("SSE events carry ids with retention off: %q", raw)
	}
	rid := resp.Header.Get("X-Request-Id")
	r, doc := e.getText(key, "/api/v1/generations/"+rid)
	wantNotFound(t, "retention off", r, doc)
	if _, _, err := e.store.GetGeneration(context.Background(), acct.ID, rid, 0); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("retention off kept the text: %v", err)
	}
	resp, err = e.post(context.Background(), key, genBody("summarizer", "x", "en", ""), "Idempotency-Key", "off-1")
	if err != nil {
		t.Fatal(err)
	}
	replay, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(replay), "already completed and charged") {
		t.Fatalf("replay with retention off: %d %q", resp.StatusCode, replay)
	}
}

// TestStalledReaderWithRetention: with retention on, a client that stops reading is cut off at
// write_timeout and its generation runs on without it; a generation that outgrows what is kept
// of one (1 MiB; here 40 MB at once) then stops, is charged once and keeps nothing, and the
// model's only place is free again.
func TestStalledReaderWithRetention(t *testing.T) {
	e, slow, slowKey, _ := stalledGeneration(t, "retention_key "+testRetentionKey)
	var rid string
	for _, en := range e.entries(slow.ID) {
		if en.Kind == ledger.KindSettle {
			rid = en.RequestID
		}
	}
	r, doc := e.getText(slowKey, "/api/v1/generations/"+rid)
	wantNotFound(t, "a generation too long to keep", r, doc)
	if s := e.count(slow.ID, ledger.KindSettle); s != 1 {
		t.Fatalf("%d settles", s)
	}
	e.verify()
}

// TestRetentionAcrossReload: a generation cut before a config reload runs on in the old
// config's handler, and the new config serves its whole text from the ledger (followed while it
// still runs), charged once.
func TestRetentionAcrossReload(t *testing.T) {
	const pieces = 50
	fsrv := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: pieces, Piece: "Osprey", Numbered: true, Delay: 20 * time.Millisecond})
	extra := "retention_key " + testRetentionKey
	e := newEnv(t, envOptions{ollama: fsrv.URL, extra: extra})
	acct, key := e.account(2)
	first, rid := e.cutAfter(key, genBody("summarizer", "x", "en", ""), len("Osprey0 Osprey1 ")) // past the first piece
	// Reload: the same ledger, a config that differs (so that Caddy replaces the handler).
	e2 := newEnv(t, envOptions{ollama: fsrv.URL, dir: e.dir, extra: extra + "\n\t\tbuy_url https://example.com/buy"})
	r, rest := e2.getText(key, "/api/v1/generations/"+rid, "Accept", "text/plain", "Range", fmt.Sprintf("bytes=%d-", len(first)))
	if r.StatusCode != http.StatusPartialContent || first+rest != numbered("Osprey", pieces) {
		t.Fatalf("after the reload: %d %q %q", r.StatusCode, first, rest)
	}
	waitFor(t, "the charge", func() bool { return e2.balance(acct.ID).Balance == 1 })
	if s := e2.count(acct.ID, ledger.KindSettle); s != 1 {
		t.Fatalf("%d settles", s)
	}
	e2.verify()
}
