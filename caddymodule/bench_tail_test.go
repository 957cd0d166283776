package caddymodule

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
)

// BenchmarkTail looks for what makes a request slow now and then: one client sends requests to
// textgen and to a bare reverse_proxy beside it, interleaved, in one Caddy in this process
// (so that the client can read the process's garbage collections), against a fault server that
// answers at once. For every request it notes its time to the first byte and whether a garbage
// collection ran meanwhile (runtime/metrics' GC cycle count, read before and after), and it
// compares the requests of the slowest 1% with all of them. It then repeats the phase with the
// collector off (GOGC off under a memory limit), and writes, to TEXTGEN_BENCH_PROFILE's folder
// when set, the block and mutex profiles of the first phase and a runtime trace in which every
// request is a task with its time to the first byte logged (go tool trace: User-defined tasks).
//
//	go test ./caddymodule -run '^$' -bench BenchmarkTail -benchtime 1x
//
// Add GODEBUG=gctrace=1 to see each collection's pauses and heap.
func BenchmarkTail(b *testing.B) {
	fs := ollamatest.NewFaultServerT(b, ollamatest.FaultConfig{Pieces: 8, Piece: "p", Numbered: true})
	dir := ledgerDir(b)
	cfg := fmt.Sprintf(`%s
http://127.0.0.1:%d {
	handle /proxy/* {
		uri strip_prefix /proxy
		reverse_proxy %s {
			flush_interval -1
		}
	}
	textgen /api/* {
%s
	}
}
`, benchGlobal("bench-tail-caddy.log"), httpPort, strings.TrimPrefix(fs.URL, "http://"), benchHandler(dir, fs.URL))
	tester := caddytest.NewTester(b).WithDefaultOverrides(caddytest.Config{AdminPort: adminPort, LoadRequestTimeout: 30 * time.Second})
	tester.InitServer(cfg, "caddyfile")
	if b.Failed() || b.Skipped() {
		b.Fatal("the Caddy config did not load")
	}
	store := textgenapp.OpenLedgers()[mustAbs(b, dir)]
	e := &env{t: b, store: store}
	_, key := e.account(10_000_000)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}}
	genReq := []byte(genBody("email-writer", "Summarize this.", "en", ""))
	var chatBody []byte // the very chat request textgen sends, set after its first request
	newReq := func(i int) *http.Request {
		if i == 0 {
			r, _ := http.NewRequest("POST", baseURL+"/api/v1/generate", bytes.NewReader(genReq))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("X-API-Key", key)
			return r
		}
		r, _ := http.NewRequest("POST", baseURL+"/proxy/api/chat", bytes.NewReader(chatBody))
		r.Header.Set("Content-Type", "application/json")
		return r
	}
	gcs := []rtmetrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	gcCount := func() uint64 {
		rtmetrics.Read(gcs)
		return gcs[0].Value.Uint64()
	}
	type sample struct {
		ttfb time.Duration
		gc   bool // a collection ran while it was served
	}
	one := func(ctx context.Context, i int) (sample, error) {
		ctx, task := trace.NewTask(ctx, []string{"textgen", "proxy"}[i])
		defer task.End()
		g0 := gcCount()
		start := time.Now()
		resp, err := client.Do(newReq(i).WithContext(ctx))
		if err != nil {
			return sample{}, err
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadByte(); err != nil {
			return sample{}, err
		}
		s := sample{ttfb: time.Since(start)}
		s.gc = gcCount() != g0
		trace.Logf(ctx, "ttfb", "%d us gc=%v", s.ttfb.Microseconds(), s.gc)
		if _, err := io.Copy(io.Discard, br); err != nil {
			return sample{}, err
		}
		if resp.StatusCode != 200 {
			return sample{}, fmt.Errorf("status %d", resp.StatusCode)
		}
		return s, nil
	}
	if _, err := one(context.Background(), 0); err != nil {
		b.Fatal(err)
	}
	chatBody, err := json.Marshal(fs.LastRequest())
	if err != nil {
		b.Fatal(err)
	}
	for range 300 {
		for i := range 2 {
			if _, err := one(context.Background(), i); err != nil {
				b.Fatal(err)
			}
		}
	}
	profDir := os.Getenv("TEXTGEN_BENCH_PROFILE")
	n := envInt(b, "TEXTGEN_BENCH_TTFB", 3000)
	phase := func(name string) {
		res := [2][]sample{}
		for r := range n {
			for k := range 2 {
				i := (k + r) % 2
				s, err := one(context.Background(), i)
				if err != nil {
					b.Fatal(err)
				}
				res[i] = append(res[i], s)
			}
		}
		for i, path := range []string{"textgen", "proxy"} {
			ds := make([]time.Duration, len(res[i]))
			withGC := 0
			for j, s := range res[i] {
				ds[j] = s.ttfb
				if s.gc {
					withGC++
				}
			}
			p50, p99, p999 := percentileUS(ds, 50), percentileUS(ds, 99), percentileUS(ds, 99.9)
			slow, slowGC := 0, 0
			for _, s := range res[i] {
				if float64(s.ttfb.Microseconds()) >= p99 {
					slow++
					if s.gc {
						slowGC++
					}
				}
			}
			b.Logf("tail: %s, %s: first byte p50 %.0f p99 %.0f p99.9 %.0f us (p99/p50 %.1fx); a collection ran during %.1f%% of all requests and %d of the %d at p99 or slower",
				name, path, p50, p99, p999, p99/p50, 100*float64(withGC)/float64(len(ds)), slowGC, slow)
			b.ReportMetric(p99/p50, fmt.Sprintf("%s-p99/p50-%s", path, strings.ReplaceAll(name, " ", "-")))
		}
	}

	if profDir != "" {
		runtime.SetBlockProfileRate(int((10 * time.Microsecond).Nanoseconds()))
		runtime.SetMutexProfileFraction(5)
		f, err := os.Create(filepath.Join(profDir, "tail.trace"))
		if err != nil {
			b.Fatal(err)
		}
		if err := trace.Start(f); err != nil {
			b.Fatal(err)
		}
		defer f.Close()
	}
	b.ResetTimer()
	phase("collector on")
	if profDir != "" {
		trace.Stop()
		for _, p := range []string{"block", "mutex"} {
			f, err := os.Create(filepath.Join(profDir, "tail-"+p+".pprof"))
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.Lookup(p).WriteTo(f, 0); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
		runtime.SetBlockProfileRate(0)
		runtime.SetMutexProfileFraction(0)
	}
	old := debug.SetGCPercent(-1)
	oldLimit := debug.SetMemoryLimit(4 << 30)
	runtime.GC()
	phase("collector off")
	debug.SetGCPercent(old)
	debug.SetMemoryLimit(oldLimit)
	e.verify()
}
