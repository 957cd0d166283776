package caddymodule

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"github.com/caddy-textgen/textgen/caddymodule/internal/apitest"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/receipts"
	"github.com/caddy-textgen/textgen/caddymodule/internal/sealing"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// receiptsSite routes the well-known path of the receipt keys to the handler too.
const receiptsSite = `@textgen path /api/* /.well-known/textgen-receipt-keys`

// fetchKeys reads the published key list as a customer would: no API key.
func (e *env) fetchKeys() receipts.KeySet {
	e.t.Helper()
	resp, body := e.getText("", receiptKeysPath)
	var set receipts.KeySet
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(body), &set) != nil {
		e.t.Fatalf("GET %s: %d %q", receiptKeysPath, resp.StatusCode, body)
	}
	return set
}

// fetchSigned reads a generation's signed receipt with key.
func (e *env) fetchSigned(key, rid string) (receipts.Signed, receipts.Generation) {
	e.t.Helper()
	resp, body := e.getText(key, generationsPath+rid+signedReceiptSuffix)
	var sr receipts.Signed
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &sr) != nil || resp.Header.Get("X-Credits-Used") != "0" {
		e.t.Fatalf("the signed receipt of %s: %d %q", rid, resp.StatusCode, body)
	}
	var g receipts.Generation
	if err := json.Unmarshal(sr.Receipt, &g); err != nil {
		e.t.Fatal(err)
	}
	return sr, g
}

// TestSignedGenerationReceipts: a real server signs a settled generation's receipt; a test that
// knows only the key list of the well-known path verifies it, and refuses it with any field or
// the text's digest changed; the digest is that of the text delivered; the first key's period
// begins before the generation it signs; after a rotation the old receipt still verifies with
// the old key, still listed, and every receipt is signed with the key whose period holds its time; what was not charged, another account's and malformed ids get a JSON 404 at no
// charge; the private key is nowhere in the ledger's directory in clear.
func TestSignedGenerationReceipts(t *testing.T) {
	logFile := filepath.Join(t.TempDir(), "caddy.log")
	e := newEnv(t, envOptions{ollama: modelServer(t), site: receiptsSite, matcher: "@textgen",
		global: "log {\n\t\toutput file " + logFile + "\n\t\tlevel DEBUG\n\t}",
		extra:  "retention 1h\n\t\tretention_key " + testRetentionKey})
	acct, key := e.account(5)
	keys, err := e.store.ListKeys(context.Background(), acct.ID)
	if err != nil || len(keys) != 1 {
		t.Fatal(keys, err)
	}
	resp, err := e.post(context.Background(), key, genBody("summarizer", "Receipts for the books, please.", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	text, _ := checkStreamed(t, resp, "4")
	rid := resp.Header.Get("X-Request-Id")

	set := e.fetchKeys()
	if len(set.Keys) != 1 || !set.Keys[0].Current || set.Keys[0].Algorithm != "Ed25519" || set.Keys[0].ValidUntil != "" {
		t.Fatalf("the key list: %+v", set)
	}
	old, g := e.fetchSigned(key, rid)
	// The key was made when the server started, not when first needed: its period holds the
	// receipt's time.
	if id := keyHolding(t, set, g.Time); id != old.KeyID {
		t.Fatalf("the receipt (time %s) is signed with %s, the key of its time is %s", g.Time, old.KeyID, id)
	}
	if err := receipts.Verify(set, old); err != nil {
		t.Fatalf("the signed receipt does not verify with the published key: %v", err)
	}
	sum := sha256.Sum256([]byte(text))
	if g.Type != "generation" || g.RequestID != rid || g.AccountID != acct.ID || g.KeyID != keys[0].ID || g.Tool != "summarizer" ||
		g.Mode != "live" || g.Credits != 1 || g.Time == "" || g.TextSHA256 != hex.EncodeToString(sum[:]) || old.KeyID != set.Keys[0].KeyID {
		t.Fatalf("receipt %+v (key %s); want the text's digest %x", g, old.KeyID, sum)
	}
	// Tampered: every field, the text's digest among them.
	for name, change := range map[string]func(*receipts.Generation){
		"credits": func(g *receipts.Generation) { g.Credits = 0 },
		"digest":  func(g *receipts.Generation) { g.TextSHA256 = hex.EncodeToString(make([]byte, 32)) },
		"request": func(g *receipts.Generation) { g.RequestID = newRequestID() },
		"account": func(g *receipts.Generation) { g.AccountID = "acct_someone_else_xxxx" },
		"key":     func(g *receipts.Generation) { g.KeyID = "key_other" },
		"tool":    func(g *receipts.Generation) { g.Tool = "translator" },
		"time":    func(g *receipts.Generation) { g.Time = "2001-01-01T00:00:00Z" },
	} {
		bad := g
		change(&bad)
		c, _ := receipts.Canonical(bad)
		if err := receipts.Verify(set, receipts.Signed{Receipt: c, Signature: old.Signature, KeyID: old.KeyID}); !errors.Is(err, receipts.ErrInvalid) {
			t.Errorf("a receipt with its %s changed: %v", name, err)
		}
	}

	// Rotation (what the admin API and the CLI ask of the handler).
	cur, err := textgenapp.ReceiptSignerFor(e.store).Rotate(context.Background())
	if err != nil || cur.KeyID == old.KeyID {
		t.Fatalf("rotation: %+v %v", cur, err)
	}
	set = e.fetchKeys()
	if len(set.Keys) != 2 || set.Keys[0].KeyID != old.KeyID || set.Keys[0].Current || set.Keys[0].ValidUntil == "" || set.Keys[1].KeyID != cur.KeyID {
		t.Fatalf("the key list after the rotation: %+v", set)
	}
	if err := receipts.Verify(set, old); err != nil {
		t.Fatalf("the old receipt after the rotation: %v", err)
	}
	resp, err = e.post(context.Background(), key, genBody("summarizer", "And one more receipt.", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	checkStreamed(t, resp, "3")
	// Each receipt is signed with the key whose listed period (in whole seconds, as receipts'
	// times are) holds its time: a generation charged before the rotation's second with the
	// old key still, one of the rotation's second or later with the new key.
	for _, r := range []string{rid, resp.Header.Get("X-Request-Id")} {
		sr, g := e.fetchSigned(key, r)
		if want := keyHolding(t, set, g.Time); sr.KeyID != want {
			t.Errorf("%s (time %s) signed after the rotation with %s, want %s; keys %+v", r, g.Time, sr.KeyID, want, set.Keys)
		}
		if err := receipts.Verify(set, sr); err != nil {
			t.Errorf("%s after the rotation: %v", r, err)
		}
	}

	// No receipt: another account's key, an unknown id, a malformed one; nothing is charged.
	_, other := e.account(1)
	for what, k := range map[string]struct{ key, rid string }{
		"another account's":   {other, rid},
		"an unknown id":       {key, newRequestID()},
		"a malformed id":      {key, "req_x"},
		"an id with a suffix": {key, rid + "/more"},
	} {
		r, body := e.getText(k.key, generationsPath+k.rid+signedReceiptSuffix)
		wantNotFound(t, what, r, body)
	}
	if b := e.balance(acct.ID); b.Available != 3 {
		t.Fatalf("available %d after the receipts; want 3", b.Available)
	}

	// The private keys are nowhere in the ledger's directory in clear.
	rks, err := e.store.ReceiptKeys(context.Background())
	if err != nil || len(rks) != 2 {
		t.Fatal(rks, err)
	}
	k, _ := base64.StdEncoding.DecodeString(testRetentionKey)
	sl, _ := sealing.New(k)
	var secrets []string
	for _, rk := range rks {
		priv, err := receipts.OpenKey(sl, rk)
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, string(priv.Seed()), base64.RawURLEncoding.EncodeToString(priv.Seed()), hex.EncodeToString(priv.Seed()))
	}
	assertNotInDir(t, e.dir, secrets...)
	e.verify()
	// Nor in the server's log (DEBUG), read after another config load has synced it.
	newEnv(t, envOptions{ollama: modelServer(t)})
	logged, err := os.ReadFile(logFile)
	if err != nil || len(logged) == 0 {
		t.Fatalf("the log: %v", err)
	}
	for _, sec := range secrets {
		if strings.Contains(string(logged), sec) {
			t.Fatal("the log holds a private receipt key")
		}
	}
}

// TestReceiptsOff: without retention there is nothing to sign a generation's text with: the
// well-known path and the receipt answer a JSON 404.
func TestReceiptsOff(t *testing.T) {
	e := newEnv(t, envOptions{ollama: modelServer(t), site: receiptsSite, matcher: "@textgen", extra: "retention off"})
	_, key := e.account(1)
	r, body := e.getText("", receiptKeysPath)
	wantNotFound(t, "the key list", r, body)
	r, body = e.getText(key, generationsPath+newRequestID()+signedReceiptSuffix)
	wantNotFound(t, "a receipt", r, body)
}

// TestSignedReceiptAfterWindowAndVoid: a receipt is still signed, with the same digest, after
// the text's window has ended and the sweep deleted it; a generation that was voided (the model
// failed after text went out: the fault server, since the real Ollama cannot be made to fail on
// demand) has no receipt.
func TestSignedReceiptAfterWindowAndVoid(t *testing.T) {
	const piece = "Ledger"
	fsrv := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 4, Piece: piece, Numbered: true, Delay: 2 * time.Millisecond})
	e := newEnv(t, envOptions{ollama: fsrv.URL, site: receiptsSite, matcher: "@textgen",
		extra: "retention 1s\n\t\tretention_key " + testRetentionKey})
	acct, key := e.account(5)
	resp, err := e.post(context.Background(), key, genBody("summarizer", "Keep my receipt.", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	text, _ := checkStreamed(t, resp, "4")
	rid := resp.Header.Get("X-Request-Id")
	waitFor(t, "the window to end", func() bool {
		r, _ := e.getText(key, generationsPath+rid)
		return r.StatusCode == http.StatusNotFound
	})
	if _, err := e.store.DeleteExpiredGenerations(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.store.GetGeneration(context.Background(), acct.ID, rid, 0); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the text is still kept: %v", err)
	}
	sr, g := e.fetchSigned(key, rid)
	sum := sha256.Sum256([]byte(text))
	if g.TextSHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("digest %s after the window, want %x", g.TextSHA256, sum)
	}
	if err := receipts.Verify(e.fetchKeys(), sr); err != nil {
		t.Fatal(err)
	}

	fsrv.Set(ollamatest.FaultConfig{Mode: ollamatest.FaultErrorAfter, Pieces: 3, Piece: piece, Delay: 2 * time.Millisecond})
	resp, err = e.post(context.Background(), key, genBody("summarizer", "This one breaks.", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	broken := resp.Header.Get("X-Request-Id")
	waitFor(t, "the void", func() bool { return e.count(acct.ID, ledger.KindVoid) == 1 })
	r, body := e.getText(key, generationsPath+broken+signedReceiptSuffix)
	wantNotFound(t, "a voided generation", r, body)
	e.verify()
}

// keyHolding is the id of the listed key whose period holds the receipt time at.
var keyHolding = apitest.KeyHolding
