package binarytest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
)

// TestStreamStack: a stream waits for the model on the stack of the caddy connection goroutine
// that serves it, which Go grows by doubling and keeps at the largest it ever was, and the
// deepest moment of a request is its first flush, when net/http writes the response headers
// under the whole handler chain. In a site as the example Caddyfile's production block, with textgen in
// a handle block (as Caddy's documentation writes sites), the plugin's frames once took that
// moment past 16 KiB: every stream then held a 32 KiB stack for as long as it ran. This runs
// streams through the built binary in such a site and reads the stack memory they hold from
// caddy's own memory statistics (its admin endpoint's expvar): a stream, with its connection's
// two goroutines, must hold less than 28 KiB of stack (16 KiB and the background reader's few
// KiB; 35.7 KiB before).
func TestStreamStack(t *testing.T) {
	const streams = 200
	if n := raiseFileLimit(t); n < 4*streams+1000 {
		t.Fatalf("the open-file limit is %d: %d streams need %d", n, streams, 4*streams+1000)
	}
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 1000, Piece: "tok ", Delay: time.Second})
	dir := t.TempDir() + "/ledger"
	// The site of the example Caddyfile's production block: compression, an access log,
	// the API under /api/, a 404 for the rest.
	site := fmt.Sprintf(`encode
	log {
		output file %s
		format filter {
			wrap json
			request>headers>X-Api-Key delete
		}
	}
	handle /api/* {
		textgen {
			ledger %s
			ollama %s
			model tiny
			rate_limit key 100000/1m
			rate_limit account 100000/1m
			max_concurrent_per_account %d
			max_in_flight %d
			queue_size %d
		}
	}
	handle {
		respond 404
	}`, t.TempDir()+"/access.log", dir, fs.URL, 2*streams, 2*streams, 2*streams)
	srv := caddyproc.Start(t, site, dir)
	acct := caddyproc.Str(t, srv.JSON("account", "create", "--email", "stack@example.com"), "id")
	key := caddyproc.Str(t, srv.JSON("key", "create", "--account", acct), "key")
	srv.JSON("credits", "grant", "--account", acct, "--credits", fmt.Sprint(2*streams), "--reference", "stack")
	open := func(n int) (stop func()) {
		t.Helper()
		client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, DisableCompression: true}}
		done := make(chan struct{})
		var started, ended sync.WaitGroup
		for range n {
			started.Add(1)
			ended.Add(1)
			go func() {
				defer ended.Done()
				req, _ := http.NewRequest(http.MethodPost, "http://"+srv.HTTP+"/api/v1/generate",
					strings.NewReader(genBody("summarizer", "Ask for the invoice", "en", "")))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-API-Key", key)
				req.Header.Set("Accept-Encoding", "gzip") // encode compresses the stream
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					started.Done()
					return
				}
				defer resp.Body.Close()
				if _, err := bufio.NewReader(resp.Body).ReadByte(); err != nil || resp.StatusCode != http.StatusOK {
					t.Errorf("stream: %d %v", resp.StatusCode, err)
				}
				started.Done()
				<-done
			}()
		}
		started.Wait()
		return func() { close(done); ended.Wait(); client.CloseIdleConnections() }
	}
	// Warm up: the first requests of a process take paths once (lazy set-ups) that may grow
	// their stacks further; those streams end before the measure.
	open(4)()
	before := stackInuse(t, srv)
	stop := open(streams)
	defer stop()
	if t.Failed() {
		t.FailNow()
	}
	per := float64(stackInuse(t, srv)-before) / streams / 1024
	t.Logf("stack memory a stream: %.1f KiB", per)
	if per >= 28 {
		t.Fatalf("a stream holds %.1f KiB of goroutine stack, want under 28 (its connection goroutine grew to 32 KiB)", per)
	}
}

// stackInuse reads the stack memory of a caddy process from its admin endpoint's expvar.
func stackInuse(t *testing.T, srv *caddyproc.Server) int64 {
	t.Helper()
	resp, err := http.Get("http://" + srv.Admin + "/debug/vars")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Memstats struct {
			StackInuse int64
		} `json:"memstats"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v.Memstats.StackInuse
}
