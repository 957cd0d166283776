package caddymodule

import (
	"bufio"
	"bytes"
	"encoding/json"
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
)

// BenchmarkIsolated is one run of the comparison .ci/bench-isolated makes: a caddy process (the
// built binary; TEXTGEN_CADDY_CPUS pins it and sets its GOMAXPROCS) serving a bare
// reverse_proxy (flush_interval -1) and textgen (durable charging, retention on, every limit on
// and out of reach) side by side, in front of one fault server that answers at once (8 pieces),
// which runs in this process with the load generator (the script pins this process to other
// cores). It measures:
//
//   - the time each path adds to the first byte over straight to the backend, 1 client, the
//     three paths interleaved request by request (TEXTGEN_BENCH_TTFB requests each, default 3,000);
//   - requests per second at 64 and 256 clients and the caddy process's CPU time per request
//     (its /proc/PID/stat), each path alone, TEXTGEN_BENCH_REQUESTS requests a phase (default
//     20,000), in the order proxy, textgen, textgen, proxy (or the reverse: TEXTGEN_BENCH_RUN odd).
//
// The output's lines starting "isolated:" are what the script collects. Run it through the
// script, or alone:
//
//	go test ./caddymodule -run '^$' -bench BenchmarkIsolated -benchtime 1x
func BenchmarkIsolated(b *testing.B) {
	fs := ollamatest.NewFaultServerT(b, ollamatest.FaultConfig{Pieces: 8, Piece: "p", Numbered: true})
	dir := ledgerDir(b)
	site := fmt.Sprintf(`handle /proxy/* {
		uri strip_prefix /proxy
		reverse_proxy %s {
			flush_interval -1
		}
	}
	textgen /api/* {
		ledger %s
		ollama %s
		model tiny
		rate_limit key 100000000/1m
		rate_limit account 100000000/1m
		max_concurrent_per_account 10000
		max_in_flight 10000
		queue_size 10000
	}`, strings.TrimPrefix(fs.URL, "http://"), dir, fs.URL)
	srv := caddyproc.Start(b, site, dir)
	acct := caddyproc.Str(b, srv.JSON("account", "create", "--email", "isolated@example.com"), "id")
	srv.JSON("credits", "grant", "--account", acct, "--credits", "100000000", "--reference", "bench-isolated")
	key := caddyproc.Str(b, srv.JSON("key", "create", "--account", acct), "key")

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxIdleConns: 1024, DisableCompression: true}}
	genReq := []byte(genBody("email-writer", "Summarize this.", "en", ""))
	var wantText strings.Builder
	for i := range 8 {
		fmt.Fprintf(&wantText, "p%d ", i)
	}
	textgenReq := func() *http.Request {
		r, _ := http.NewRequest("POST", "http://"+srv.HTTP+"/api/v1/generate", bytes.NewReader(genReq))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-API-Key", key)
		return r
	}
	// direct and proxy send the backend the very chat request textgen builds.
	resp, err := client.Do(textgenReq())
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	chatBody, err := json.Marshal(fs.LastRequest())
	if err != nil {
		b.Fatal(err)
	}
	chatReq := func(url string) func() *http.Request {
		return func() *http.Request {
			r, _ := http.NewRequest("POST", url, bytes.NewReader(chatBody))
			r.Header.Set("Content-Type", "application/json")
			return r
		}
	}
	type path struct {
		name  string
		req   func() *http.Request
		check func([]byte) bool
	}
	ndjson := func(body []byte) bool { return bytes.Count(body, []byte("\n")) == 9 }
	paths := []path{
		{"direct", chatReq(fs.URL + "/api/chat"), ndjson},
		{"proxy", chatReq("http://" + srv.HTTP + "/proxy/api/chat"), ndjson},
		{"textgen", textgenReq, func(body []byte) bool { return string(body) == wantText.String() }},
	}
	one := func(p path) (time.Duration, error) {
		start := time.Now()
		resp, err := client.Do(p.req())
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		first, err := br.ReadByte()
		ttfb := time.Since(start)
		if err != nil {
			return 0, err
		}
		rest, err := io.ReadAll(br)
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != 200 || !p.check(append([]byte{first}, rest...)) {
			return 0, fmt.Errorf("%s: status %d, body %q", p.name, resp.StatusCode, append([]byte{first}, rest...))
		}
		return ttfb, nil
	}
	for range 300 { // warm up: connections, the model's window, caches
		for _, p := range paths {
			if _, err := one(p); err != nil {
				b.Fatal(err)
			}
		}
	}
	run := envInt(b, "TEXTGEN_BENCH_RUN", 1)
	b.ResetTimer()

	// Added time to the first byte, 1 client, interleaved.
	n := envInt(b, "TEXTGEN_BENCH_TTFB", 3000)
	lat := make([][]time.Duration, len(paths))
	for r := range n {
		for k := range paths {
			i := (k + r) % len(paths)
			d, err := one(paths[i])
			if err != nil {
				b.Fatal(err)
			}
			lat[i] = append(lat[i], d)
		}
	}
	d50, d99 := percentileUS(lat[0], 50), percentileUS(lat[0], 99)
	p50, p99 := percentileUS(lat[1], 50)-d50, percentileUS(lat[1], 99)-d99
	t50, t99 := percentileUS(lat[2], 50)-d50, percentileUS(lat[2], 99)-d99
	b.ReportMetric(p50, "proxy-added-p50-us")
	b.ReportMetric(t50, "textgen-added-p50-us")
	b.ReportMetric(t50/p50, "added-p50-textgen/proxy")
	b.ReportMetric(t99/p99, "added-p99-textgen/proxy")
	b.Logf("isolated: run %d ttfb 1 client (%d requests each): direct p50 %.0f p99 %.0f us; added p50 proxy %.0f textgen %.0f us (%.2fx); added p99 proxy %.0f textgen %.0f us (%.2fx)",
		run, n, d50, d99, p50, t50, t50/p50, p99, t99, t99/p99)

	// Requests per second and caddy's CPU per request, each path alone.
	reqs := envInt(b, "TEXTGEN_BENCH_REQUESTS", 20000)
	for _, conc := range []int{64, 256} {
		order := []int{1, 2, 2, 1}
		if run%2 == 0 {
			order = []int{2, 1, 1, 2}
		}
		var rps, cpu [3]float64
		for _, i := range order {
			c0 := procCPU(b, srv.Pid())
			start := time.Now()
			if err := loadPhase(reqs, conc, func() error { _, err := one(paths[i]); return err }); err != nil {
				b.Fatal(err)
			}
			el := time.Since(start)
			c1 := procCPU(b, srv.Pid())
			rps[i] += float64(reqs) / el.Seconds() / 2
			cpu[i] += float64((c1 - c0).Microseconds()) / float64(reqs) / 2
		}
		b.ReportMetric(rps[2]/rps[1], fmt.Sprintf("rps-textgen/proxy/c%d", conc))
		b.ReportMetric(cpu[2]-cpu[1], fmt.Sprintf("cpu-extra-us/c%d", conc))
		b.Logf("isolated: run %d clients %d: requests/s proxy %.0f textgen %.0f (%.2fx); caddy CPU a request proxy %.1f textgen %.1f us (+%.1f us)",
			run, conc, rps[1], rps[2], rps[2]/rps[1], cpu[1], cpu[2], cpu[2]-cpu[1])
	}
	if v := srv.JSON("ledger", "verify"); !caddyproc.Bool(b, v, "ok") {
		b.Fatalf("verify: %v", v)
	}
}

// loadPhase runs n calls of one from conc clients; the first error ends it.
func loadPhase(n, conc int, one func() error) error {
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := one(); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	err, _ := failed.Load().(error)
	return err
}
