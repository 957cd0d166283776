package caddymodule

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// BenchmarkLargeLedgerHTTP measures generations over HTTP on a large Badger ledger against an
// empty one, in one run and one process: the same handler, backend and load, two ledgers. The
// large ledger is the one BenchmarkLargeLedgerBuild (ledger/badgerledger) writes; this benchmark
// adds a key and credits to each of the accounts it uses (TEXTGEN_LARGE_HTTP_ACCOUNTS, default
// 1,000, the first by id), and the same number of new accounts to the empty ledger. Requests
// rotate over the accounts' keys, so every account is read into the ledger's cache once during
// the warm-up and the figures are the steady state.
//
//	TEXTGEN_LARGE_LEDGER=/data/large go test ./caddymodule -run '^$' -bench LargeLedgerHTTP -benchtime 1x -timeout 30m
//
// It reports the time to the first byte at 1 client (interleaved, p50 and p99), and requests/s
// and the process's CPU a request at 64 clients (phases empty, large, large, empty), each as
// large/empty.
func BenchmarkLargeLedgerHTTP(b *testing.B) {
	large := os.Getenv("TEXTGEN_LARGE_LEDGER")
	if large == "" {
		b.Skip("TEXTGEN_LARGE_LEDGER names the directory of a large ledger (ledger/badgerledger's BenchmarkLargeLedgerBuild)")
	}
	large = mustAbs(b, large)
	if _, err := os.Stat(filepath.Join(large, "MANIFEST")); err != nil {
		b.Fatalf("TEXTGEN_LARGE_LEDGER: %s holds no Badger ledger (%v)", large, err)
	}
	accounts := envInt(b, "TEXTGEN_LARGE_HTTP_ACCOUNTS", 1000)
	fs := ollamatest.NewFaultServerT(b, ollamatest.FaultConfig{Pieces: 8, Piece: "p", Numbered: true})
	empty := ledgerDir(b)
	cfg := fmt.Sprintf(`%s
http://127.0.0.1:%d {
	handle_path /large/* {
		textgen {
%s
		}
	}
	textgen /api/* {
%s
	}
}
`, benchGlobal("bench-large-caddy.log"), httpPort, benchHandler(large, fs.URL), benchHandler(empty, fs.URL))
	tester := caddytest.NewTester(b).WithDefaultOverrides(caddytest.Config{AdminPort: adminPort, LoadRequestTimeout: 5 * time.Minute})
	tester.InitServer(cfg, "caddyfile")
	if b.Failed() || b.Skipped() {
		b.Fatal("the Caddy config did not load")
	}
	open := textgenapp.OpenLedgers()
	emptyKeys := benchKeys(b, open[mustAbs(b, empty)], accounts, false)
	largeKeys := benchKeys(b, open[large], accounts, true)

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxIdleConns: 1024, DisableCompression: true}}
	body := genBody("email-writer", "Summarize this.", "en", "")
	var want bytes.Buffer
	for i := range 8 {
		fmt.Fprintf(&want, "p%d ", i)
	}
	type path struct {
		name string
		url  string
		keys []string
	}
	paths := []path{{"empty", baseURL + "/api/v1/generate", emptyKeys}, {"large", baseURL + "/large/api/v1/generate", largeKeys}}
	// one makes the i-th request of p: the time to its first byte, its whole text checked.
	one := func(p path, i int) (time.Duration, error) {
		return timeGenerateAt(client, p.url, p.keys[i%len(p.keys)], body, want.String())
	}
	// The warm-up uses every account once on each ledger (the large one reads it into its cache).
	for i := range accounts + 200 {
		for _, p := range paths {
			if _, err := one(p, i); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()

	rounds := envInt(b, "TEXTGEN_LARGE_HTTP_ROUNDS", 3000)
	lat := make([][]time.Duration, len(paths))
	for r := range rounds {
		for k := range paths {
			i := (k + r) % len(paths)
			d, err := one(paths[i], r)
			if err != nil {
				b.Fatal(err)
			}
			lat[i] = append(lat[i], d)
		}
	}
	p50 := [2]float64{percentileUS(lat[0], 50), percentileUS(lat[1], 50)}
	p99 := [2]float64{percentileUS(lat[0], 99), percentileUS(lat[1], 99)}
	b.ReportMetric(p50[1]/p50[0], "large/empty-ttfb-p50")
	b.ReportMetric(p99[1]/p99[0], "large/empty-ttfb-p99")
	b.Logf("1 client, time to the first byte p50/p99 (us): empty %.0f/%.0f, large %.0f/%.0f (%.2fx/%.2fx; %d requests each)",
		p50[0], p99[0], p50[1], p99[1], p50[1]/p50[0], p99[1]/p99[0], rounds)

	n := envInt(b, "TEXTGEN_BENCH_REQUESTS", 4000)
	rps := make([]float64, len(paths))
	cpu := make([]float64, len(paths))
	for _, i := range []int{0, 1, 1, 0} {
		stopProfile := phaseProfile(b, "large-http-"+paths[i].name)
		cpu0 := processCPU(b)
		rps[i] += genRate(b, int64(n), 64, func(k int64) error { _, err := one(paths[i], int(k)); return err }) / 2
		cpu[i] += float64((processCPU(b) - cpu0).Microseconds()) / float64(n) / 2
		stopProfile()
	}
	b.ReportMetric(rps[1]/rps[0], "large/empty-throughput")
	b.ReportMetric(cpu[1]/cpu[0], "large/empty-cpu")
	b.Logf("64 clients: requests/s empty %.0f, large %.0f (%.2f); CPU a request (us, the whole process) empty %.0f, large %.0f (%.2fx)",
		rps[0], rps[1], rps[1]/rps[0], cpu[0], cpu[1], cpu[1]/cpu[0])
}

// benchKeys returns a live key for each of n accounts of store, each with credits for the run:
// existing accounts (the first n by id) when existing, else new ones.
func benchKeys(b *testing.B, store ledger.Store, n int, existing bool) []string {
	b.Helper()
	if store == nil {
		b.Fatal("the ledger is not open")
	}
	ctx := context.Background()
	var ids []string
	if existing {
		cursor := ""
		for len(ids) < n {
			page, next, err := store.ListAccounts(ctx, ledger.Page{Limit: min(n-len(ids), 500), Cursor: cursor})
			if err != nil {
				b.Fatal(err)
			}
			for _, a := range page {
				if a.Status != ledger.StatusDisabled {
					ids = append(ids, a.ID)
				}
			}
			if next == "" {
				break
			}
			cursor = next
		}
		if len(ids) < n {
			b.Fatalf("the large ledger has %d usable accounts, fewer than %d", len(ids), n)
		}
	} else {
		for i := range n {
			a, err := store.CreateAccount(ctx, fmt.Sprintf("bench-%d@example.com", i))
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, a.ID)
		}
	}
	keys := make([]string, 0, n)
	run := time.Now().UnixNano()
	for _, id := range ids {
		key, _, err := store.CreateKey(ctx, id, ledger.Live, "bench", time.Time{})
		if err != nil {
			b.Fatalf("a key for %s: %v", id, err)
		}
		if _, err := store.Grant(ctx, ledger.GrantRequest{AccountID: id, Mode: ledger.Live, Kind: ledger.KindGrant,
			Credits: 1_000_000, Reference: fmt.Sprintf("bench-%d-%s", run, id)}); err != nil {
			b.Fatalf("credits for %s: %v", id, err)
		}
		keys = append(keys, key)
	}
	return keys
}
