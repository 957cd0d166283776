package caddymodule

import (
	"bufio"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// BenchmarkSharedLedger measures what the PostgreSQL ledger costs against the Badger ledger,
// in one run, with separate caddy processes (the built binary) and one fault server that
// answers at once (8 pieces):
//   - time to first byte at 1 client, one caddy on Badger and one on PostgreSQL, interleaved;
//   - generations per second at 64 clients: one caddy on Badger (one hot account), two caddy
//     instances on one PostgreSQL database with the requests spread over both (one hot account,
//     and 64 accounts).
//
// Load generator, two or three caddy processes, PostgreSQL and the backend share the machine's
// cores, so read the figures as ratios. Run it with
//
//	go test ./caddymodule -run '^$' -bench BenchmarkSharedLedger -benchtime 1x
func BenchmarkSharedLedger(b *testing.B) {
	fs := ollamatest.NewFaultServerT(b, ollamatest.FaultConfig{Pieces: 8, Piece: "tok "})
	url := pgtest.NewDatabase(b)
	dir := ledgerDir(b)
	site := func(ledgerSpec string) string { return pgSite(ledgerSpec, fs.URL, "") }
	bdg := caddyproc.Start(b, site(dir), dir)
	pgA := caddyproc.Start(b, site(url), url)
	pgB := caddyproc.Start(b, site(url), url)

	newAccount := func(s *caddyproc.Server, email string, credits int) string {
		id := caddyproc.Str(b, s.JSON("account", "create", "--email", email), "id")
		s.JSON("credits", "grant", "--account", id, "--credits", fmt.Sprint(credits), "--reference", "bench-"+email)
		return caddyproc.Str(b, s.JSON("key", "create", "--account", id), "key")
	}
	badgerHot := newAccount(bdg, "hot@example.com", 10_000_000)
	pgHot := newAccount(pgA, "hot@example.com", 10_000_000)
	spread := make([]string, 64)
	for i := range spread {
		spread[i] = newAccount(pgB, fmt.Sprintf("spread%d@example.com", i), 1_000_000)
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	body := genBody("summarizer", "x", "en", "")
	const want = "tok tok tok tok tok tok tok tok "
	one := func(addr, key string) (time.Duration, error) { return timeGenerate(client, addr, key, body, want) }
	for range 200 { // warm up
		for _, t := range [][2]string{{bdg.HTTP, badgerHot}, {pgA.HTTP, pgHot}, {pgB.HTTP, pgHot}} {
			if _, err := one(t[0], t[1]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()

	// Time to first byte at 1 client, Badger and PostgreSQL interleaved.
	lat := [2][]time.Duration{}
	for r := range 1500 {
		for k := range 2 {
			i := (k + r) % 2
			addr, key := bdg.HTTP, badgerHot
			if i == 1 {
				addr, key = pgA.HTTP, pgHot
			}
			d, err := one(addr, key)
			if err != nil {
				b.Fatal(err)
			}
			lat[i] = append(lat[i], d)
		}
	}
	bp50, bp99 := percentileUS(lat[0], 50), percentileUS(lat[0], 99)
	pp50, pp99 := percentileUS(lat[1], 50), percentileUS(lat[1], 99)
	b.ReportMetric(bp50, "badger-ttfb-p50-us")
	b.ReportMetric(bp99, "badger-ttfb-p99-us")
	b.ReportMetric(pp50, "postgres-ttfb-p50-us")
	b.ReportMetric(pp99, "postgres-ttfb-p99-us")
	b.ReportMetric(pp50-bp50, "postgres-added-p50-us")
	b.Logf("1 client, time to first byte p50/p99 (us): Badger %.0f/%.0f, PostgreSQL %.0f/%.0f (+%.0f us p50)", bp50, bp99, pp50, pp99, pp50-bp50)

	// Generations per second at 64 clients.
	rate := func(pick func(i int64) (string, string)) float64 {
		return genRate(b, 6000, 64, func(i int64) error {
			addr, key := pick(i)
			_, err := one(addr, key)
			return err
		})
	}
	badgerRate := rate(func(int64) (string, string) { return bdg.HTTP, badgerHot })
	hotRate := rate(func(i int64) (string, string) {
		if i%2 == 0 {
			return pgA.HTTP, pgHot
		}
		return pgB.HTTP, pgHot
	})
	spreadRate := rate(func(i int64) (string, string) {
		addr := pgA.HTTP
		if i%2 == 0 {
			addr = pgB.HTTP
		}
		return addr, spread[i%int64(len(spread))]
	})
	b.ReportMetric(badgerRate, "badger-1-instance-hot-gen/s")
	b.ReportMetric(hotRate, "postgres-2-instances-hot-gen/s")
	b.ReportMetric(spreadRate, "postgres-2-instances-64-accounts-gen/s")
	b.ReportMetric(hotRate/badgerRate, "postgres-hot/badger")
	b.Logf("64 clients, generations/s: Badger, 1 instance, 1 account %.0f; PostgreSQL, 2 instances, 1 account %.0f (%.2fx), 64 accounts %.0f",
		badgerRate, hotRate, hotRate/badgerRate, spreadRate)

	for _, s := range []*caddyproc.Server{bdg, pgA} {
		if v := s.JSON("ledger", "verify"); !caddyproc.Bool(b, v, "ok") {
			b.Fatalf("verify: %v", v)
		}
	}
}

// timeGenerate sends one generate request to the server at addr and returns its time to the
// first byte, after reading the whole answer and checking it is a 200 with want.
func timeGenerate(client *http.Client, addr, key, body, want string) (time.Duration, error) {
	return timeGenerateAt(client, "http://"+addr+"/api/v1/generate", key, body, want)
}

// timeGenerateAt is timeGenerate of the generate request at url.
func timeGenerateAt(client *http.Client, url, key, body, want string) (time.Duration, error) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadByte()
	if err != nil {
		return 0, err
	}
	ttfb := time.Since(start)
	var rest strings.Builder
	rest.WriteByte(first)
	if _, err := br.WriteTo(&rest); err != nil {
		return 0, err
	}
	if resp.StatusCode != 200 || rest.String() != want {
		return 0, fmt.Errorf("%s: %d %q", url, resp.StatusCode, rest.String())
	}
	return ttfb, nil
}

// genRate runs n calls of one (numbered from 1) from conc clients and returns the calls per
// second; the first error fails the benchmark.
func genRate(b *testing.B, n, conc int64, one func(i int64) error) float64 {
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > n {
					return
				}
				if err := one(i); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return float64(n) / time.Since(start).Seconds()
}

// pgSite is a site block whose textgen handler keeps its ledger in the database at url, with
// the limits out of reach (this benchmark loads the ledger, not the limits).
func pgSite(url, model, extra string) string {
	return fmt.Sprintf("textgen {\n\t\tledger %s\n\t\tollama %s\n\t\tmodel tiny\n\t\trate_limit key off\n\t\trate_limit account off\n\t\tauth_failure_limit off\n\t\tmax_concurrent_per_account 1000\n\t\tmax_in_flight 1000\n\t\tqueue_size 1000\n%s\t}", url, model, extra)
}

// benchGlobal is the global options block of the benchmarks' in-process Caddy: the test run's
// ports, and Caddy's log (one line a request) in the file logName under testRoot, so that its
// cost stays in the figures and its lines out of the benchmark's output.
func benchGlobal(logName string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	skip_install_trust
	log {
		output file %s
	}
}`, adminPort, httpPort, httpsPort, filepath.Join(testRoot, logName))
}

// benchHandler is the settings of the benchmarks' textgen handler on the ledger dir and the
// model server ollama: the limits are on (their code runs on every request) but out of the
// load's reach.
func benchHandler(dir, ollama string) string {
	return fmt.Sprintf(`		ledger %s
		ollama %s
		model tiny
		rate_limit key 100000000/1m
		rate_limit account 100000000/1m
		max_concurrent_per_account 10000
		max_in_flight 10000`, dir, ollama)
}
