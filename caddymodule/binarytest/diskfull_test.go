//go:build linux

package binarytest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/ledger/disktest"
)

// TestServerOnFullDisk runs a real caddy process whose ledger lives on a real 40 MB file system
// that another file fills up, twice: while the server runs, and while it is stopped. The server
// stays up; generate requests get 503 ledger_unavailable and are charged nothing; balance, tools
// and readiness answer, readiness and a metric name the cause; the server recovers by itself
// when the file is removed. Before the space guard, the first request after the disk filled
// killed the process with SIGBUS, and it died again at every start.
func TestServerOnFullDisk(t *testing.T) {
	disktest.Run(t, 40<<20, func(t *testing.T, dir string) {
		fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "tok "})
		ledgerDir := dir + "/ledger"
		site := fmt.Sprintf("handle /metrics {\n\t\tmetrics\n\t}\n\ttextgen {\n\t\tledger %s\n\t\tollama %s\n\t\tmodel tiny\n\t}", ledgerDir, fs.URL)
		srv := caddyproc.Start(t, site, ledgerDir)
		acct := caddyproc.Str(t, srv.JSON("account", "create", "--email", "full@example.com"), "id")
		key := caddyproc.Str(t, srv.JSON("key", "create", "--account", acct), "key")
		srv.JSON("credits", "grant", "--account", acct, "--credits", "10", "--reference", "disk-test")
		if code := srv.Generate(key, "summarizer"); code != http.StatusOK {
			t.Fatalf("generate with space: %d", code)
		}

		remove := disktest.Fill(t, dir)
		waitReady(t, srv, false, "the ledger's disk is nearly full")
		checkRefused(t, srv, key, 9)
		if m := scrapeURL(t, "http://"+srv.HTTP+"/metrics"); m["caddy_textgen_ledger_unavailable"] != 1 ||
			m[`caddy_textgen_rejections_total{reason="ledger_unavailable"}`] < 1 {
			t.Errorf("metrics on a full disk: unavailable %v, rejections %v", m["caddy_textgen_ledger_unavailable"],
				m[`caddy_textgen_rejections_total{reason="ledger_unavailable"}`])
		}

		remove()
		waitReady(t, srv, true, "")
		if code := srv.Generate(key, "summarizer"); code != http.StatusOK {
			t.Fatalf("generate after space came back: %d", code)
		}

		// Stopped, the disk fills; the server starts anyway, serves what it can, and recovers.
		srv.Stop()
		// A graceful stop closes the ledger (and its kept generations) whatever still held it
		// (the kept text's flusher): Badger writes its memtable out and removes its log, so the
		// next start has nothing to replay.
		for _, d := range []string{ledgerDir, ledgerDir + "/generations"} {
			if logs, _ := filepath.Glob(d + "/*.mem"); len(logs) > 0 {
				t.Fatalf("a graceful stop left write-ahead logs to replay: %v", logs)
			}
		}
		remove = disktest.Fill(t, dir)
		srv = caddyproc.Start(t, site, ledgerDir)
		waitReady(t, srv, false, "the ledger's disk is nearly full")
		checkRefused(t, srv, key, 8)
		remove()
		waitReady(t, srv, true, "")
		if code := srv.Generate(key, "summarizer"); code != http.StatusOK {
			t.Fatalf("generate after space came back at start: %d", code)
		}
		bal := srv.JSON("balance", "--account", acct)
		if b, a := caddyproc.Num(t, bal, "balance"), caddyproc.Num(t, bal, "available"); b != 7 || a != 7 {
			t.Fatalf("balance %d, available %d; want 7 and 7 (three generations charged, nothing else)", b, a)
		}
		if v := srv.JSON("ledger", "verify"); !caddyproc.Bool(t, v, "ok") {
			t.Fatalf("verify: %v", v)
		}

		// Killed (a crash): its last commits are in Badger's log only, and the disk fills. The
		// log must be replayed, which needs space: the server starts with the ledger not open,
		// refuses (503, nothing charged) and says why, and opens it once space is back, with
		// everything the killed process committed.
		srv.Kill()
		remove = disktest.Fill(t, dir)
		srv = caddyproc.Start(t, site, "") // wait for Caddy only: its ledger does not open yet
		waitReady(t, srv, false, "the ledger's disk is nearly full")
		for _, path := range []string{"/api/v1/generate", "/api/v1/balance"} {
			method, body := http.MethodPost, genBody("summarizer", "x", "en", "")
			if path == "/api/v1/balance" {
				method, body = http.MethodGet, ""
			}
			req, _ := http.NewRequest(method, "http://"+srv.HTTP+path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-API-Key", key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s with the ledger not open: %v (did the server die?)", path, err)
			}
			b := decodeErr(t, resp)
			if resp.StatusCode != http.StatusServiceUnavailable || b.Error.Code != "ledger_unavailable" ||
				resp.Header.Get("X-Credits-Used") != "0" || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("%s with the ledger not open: %d %s %v, want 503 ledger_unavailable with Retry-After", path, resp.StatusCode, b.Error.Code, resp.Header)
			}
		}
		remove()
		waitReady(t, srv, true, "")
		if code := srv.Generate(key, "summarizer"); code != http.StatusOK {
			t.Fatalf("generate once the log was replayed: %d", code)
		}
		bal = srv.JSON("balance", "--account", acct)
		if b, a := caddyproc.Num(t, bal, "balance"), caddyproc.Num(t, bal, "available"); b != 6 || a != 6 {
			t.Fatalf("balance %d, available %d after the crash; want 6 and 6", b, a)
		}
		if v := srv.JSON("ledger", "verify"); !caddyproc.Bool(t, v, "ok") {
			t.Fatalf("verify after the crash: %v", v)
		}
	})
}

// checkRefused: on a full disk a generate request is 503 ledger_unavailable with no charge,
// as docs/openapi.json documents it, while the balance (available credits: want) and the tools
// are served.
func checkRefused(t *testing.T, srv *caddyproc.Server, key string, want int64) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+srv.HTTP+"/api/v1/generate", strings.NewReader(genBody("summarizer", "x", "en", "")))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("generate on a full disk: %v (did the server die?)", err)
	}
	documented(t, req, resp) // the answer docs/openapi.json documents
	b := decodeErr(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || b.Error.Code != "ledger_unavailable" ||
		resp.Header.Get("X-Credits-Used") != "0" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("generate on a full disk: %d %s %v, want 503 ledger_unavailable with Retry-After", resp.StatusCode, b.Error.Code, resp.Header)
	}
	req, _ = http.NewRequest(http.MethodGet, "http://"+srv.HTTP+"/api/v1/balance", nil)
	req.Header.Set("X-API-Key", key)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var bal struct {
		Available int64 `json:"available"`
	}
	json.NewDecoder(resp.Body).Decode(&bal)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || bal.Available != want {
		t.Fatalf("balance on a full disk: %d %+v, want 200 and %d", resp.StatusCode, bal, want)
	}
	resp, err = http.Get("http://" + srv.HTTP + "/api/v1/tools")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tools on a full disk: %d", resp.StatusCode)
	}
}

// waitReady polls GET /api/v1/ready until it says ready (or not ready, with reason in its
// answer). The bound is a safety net, not a timing assertion.
func waitReady(t *testing.T, srv *caddyproc.Server, ready bool, reason string) {
	t.Helper()
	var last string
	for range 600 {
		resp, err := http.Get("http://" + srv.HTTP + "/api/v1/ready")
		if err != nil {
			t.Fatalf("readiness: %v (did the server die?)", err)
		}
		var doc struct {
			Ready  bool   `json:"ready"`
			Reason string `json:"reason"`
		}
		json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		last = fmt.Sprintf("%d %+v", resp.StatusCode, doc)
		// The fault server answers health checks, so the model side is ready throughout.
		if doc.Ready == ready && (ready || (resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(doc.Reason, reason))) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("readiness never became ready=%v (%q): last %s", ready, reason, last)
}

// scrapeURL reads a Prometheus endpoint into series -> value (caddy_textgen_ series only).
func scrapeURL(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return parseMetrics(t, resp)
}
