package caddymodule

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/caddymodule/internal/redistest"
)

// BenchmarkRedisLimits measures what keeping the limits in Redis costs against keeping them in
// memory, in one run: two caddy processes (the built binary), each on its own Badger ledger
// with every limit on and out of reach (key, account, concurrency, max_in_flight), one with
// limits_store on a real redis-server; one fault server answering at once (8 pieces):
//   - time to first byte at 1 client, the two interleaved;
//   - generations per second at 64 clients on one hot account, one after the other.
//
// Load generator, both caddy processes, Redis and the backend share the machine's cores: read
// the figures as ratios. Run it with
//
//	go test ./caddymodule -run '^$' -bench BenchmarkRedisLimits -benchtime 1x
func BenchmarkRedisLimits(b *testing.B) {
	fs := ollamatest.NewFaultServerT(b, ollamatest.FaultConfig{Pieces: 8, Piece: "tok "})
	rs := redistest.New(b)
	limits := "\t\trate_limit key 100000000/1m\n\t\trate_limit account 100000000/1m\n\t\tmax_concurrent_per_account 1000\n\t\tmax_in_flight 1000\n\t\tqueue_size 1000\n"
	site := func(dir, store string) string {
		return fmt.Sprintf("textgen {\n\t\tledger %s\n\t\tollama %s\n\t\tmodel tiny\n%s%s\t}", dir, fs.URL, limits, store)
	}
	memDir, redisDir := ledgerDir(b), ledgerDir(b)
	mem := caddyproc.Start(b, site(memDir, ""), memDir)
	red := caddyproc.Start(b, site(redisDir, "\t\tlimits_store "+rs.URL(0)+"\n"), redisDir)
	newKey := func(s *caddyproc.Server) string {
		id := caddyproc.Str(b, s.JSON("account", "create", "--email", "hot@example.com"), "id")
		s.JSON("credits", "grant", "--account", id, "--credits", "10000000", "--reference", "bench")
		return caddyproc.Str(b, s.JSON("key", "create", "--account", id), "key")
	}
	servers := [2]*caddyproc.Server{mem, red}
	keys := [2]string{newKey(mem), newKey(red)}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	body := genBody("summarizer", "x", "en", "")
	const want = "tok tok tok tok tok tok tok tok "
	one := func(i int) (time.Duration, error) { return timeGenerate(client, servers[i].HTTP, keys[i], body, want) }
	for range 300 { // warm up
		for i := range 2 {
			if _, err := one(i); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()

	lat := [2][]time.Duration{}
	for r := range 2000 {
		for k := range 2 {
			i := (k + r) % 2
			d, err := one(i)
			if err != nil {
				b.Fatal(err)
			}
			lat[i] = append(lat[i], d)
		}
	}
	mp50, mp99 := percentileUS(lat[0], 50), percentileUS(lat[0], 99)
	rp50, rp99 := percentileUS(lat[1], 50), percentileUS(lat[1], 99)
	b.ReportMetric(mp50, "memory-ttfb-p50-us")
	b.ReportMetric(rp50, "redis-ttfb-p50-us")
	b.ReportMetric(rp50-mp50, "redis-added-p50-us")
	b.ReportMetric(rp99-mp99, "redis-added-p99-us")
	b.Logf("1 client, time to first byte p50/p99 (us): limits in memory %.0f/%.0f, in Redis %.0f/%.0f (+%.0f us p50, +%.0f us p99)",
		mp50, mp99, rp50, rp99, rp50-mp50, rp99-mp99)

	rate := func(i int) float64 {
		return genRate(b, 6000, 64, func(int64) error {
			_, err := one(i)
			return err
		})
	}
	memRate, redisRate := rate(0), rate(1)
	b.ReportMetric(memRate, "memory-gen/s")
	b.ReportMetric(redisRate, "redis-gen/s")
	b.ReportMetric(redisRate/memRate, "redis/memory")
	b.Logf("64 clients, one hot account, generations/s: limits in memory %.0f, in Redis %.0f (%.2fx)", memRate, redisRate, redisRate/memRate)
	if v := metric(b, red, "caddy_textgen_limits_fallback_total"); v != 0 {
		b.Fatalf("%v limit checks fell back to memory: the figures are not Redis's", v)
	}
}

// metric is the value of one caddy_textgen_ series of s's metrics.
func metric(t testing.TB, s *caddyproc.Server, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + s.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return parseMetrics(t, resp)[series]
}
