package caddymodule

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
)

// BenchmarkLongStreams is the real load of this product: many generations open at
// once, each streaming for a long time at a few pieces a second. By default 10,000 concurrent
// generations of 60 pieces 500 ms apart (30 s each) go through a caddy process (the built
// binary) with textgen, then through another with a bare reverse_proxy to the same backend; load
// generator, Caddy and backend share the machine's cores. For each path it reports whether
// every stream came whole and in order, the slowest gap a client saw between two pieces (p99,
// and how much above the backend's own), the caddy process's peak RSS, and its CPU time per
// piece. Smaller runs: TEXTGEN_BENCH_STREAMS=1000 TEXTGEN_BENCH_STREAM_GAP=50ms.
//
//	go test ./caddymodule -run '^$' -bench BenchmarkLongStreams -benchtime 1x -timeout 30m
//
// The benchmark raises this process's open-file limit (caddy inherits it): 10,000 streams take
// about 20,000 descriptors in caddy, and as many here (the clients and the backend).
func BenchmarkLongStreams(b *testing.B) {
	n := envInt(b, "TEXTGEN_BENCH_STREAMS", 10000)
	pieces := envInt(b, "TEXTGEN_BENCH_STREAM_PIECES", 60)
	gap := 500 * time.Millisecond
	if v := os.Getenv("TEXTGEN_BENCH_STREAM_GAP"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("TEXTGEN_BENCH_STREAM_GAP: %v", err)
		}
		gap = d
	}
	limit := raiseFileLimit(b)
	// Each stream takes two descriptors in caddy (client and backend connections) and two here
	// (client and the backend's side); a few hundred more go to files and listeners.
	if fit := int(limit-300) / 2; n > fit {
		b.Logf("the open-file hard limit is %d (and may not be raised here): %d streams fit, not %d", limit, fit, n)
		n = fit
	}

	fs := ollamatest.NewFaultServerT(b, ollamatest.FaultConfig{Pieces: pieces, Piece: "s", Numbered: true, Delay: gap})
	// Each path in a caddy process of its own, so that each one's memory is its own.
	ledger := ledgerDir(b)
	tg := caddyproc.Start(b, longStreamsSite(ledger, fs.URL), ledger)
	proxy := caddyproc.Start(b, fmt.Sprintf(`reverse_proxy %s {
		flush_interval -1
	}`, strings.TrimPrefix(fs.URL, "http://")), "")
	acct := caddyproc.Str(b, tg.JSON("account", "create", "--email", "streams@example.com"), "id")
	key := caddyproc.Str(b, tg.JSON("key", "create", "--account", acct, "--name", "bench"), "key")
	tg.JSON("credits", "grant", "--account", acct, "--credits", strconv.Itoa(n), "--reference", "bench")

	var want strings.Builder
	for i := 0; i < pieces; i++ {
		want.WriteString("s" + strconv.Itoa(i) + " ")
	}
	genBodyJSON := []byte(genBody("email-writer", "Write it.", "en", ""))
	chatBody := []byte(`{"model":"tiny","stream":true,"messages":[{"role":"user","content":"Write it."}]}`)
	paths := []struct {
		name  string
		srv   *caddyproc.Server
		req   func() *http.Request
		check func(body []byte) error
	}{
		{"textgen", tg, func() *http.Request {
			r, _ := http.NewRequest("POST", "http://"+tg.HTTP+"/api/v1/generate", bytes.NewReader(genBodyJSON))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("X-API-Key", key)
			return r
		}, func(body []byte) error {
			if string(body) != want.String() {
				return fmt.Errorf("a text of %d bytes is not the %d pieces in order", len(body), pieces)
			}
			return nil
		}},
		{"proxy", proxy, func() *http.Request {
			r, _ := http.NewRequest("POST", "http://"+proxy.HTTP+"/api/chat", bytes.NewReader(chatBody))
			r.Header.Set("Content-Type", "application/json")
			return r
		}, func(body []byte) error {
			if c := bytes.Count(body, []byte("\n")); c != pieces+1 {
				return fmt.Errorf("%d NDJSON lines, want %d", c, pieces+1)
			}
			return nil
		}},
	}
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: n, MaxIdleConns: n, DisableCompression: true,
		DialContext: (&net.Dialer{Timeout: time.Minute}).DialContext,
	}}

	b.ResetTimer()
	for _, p := range paths {
		atPeak := func() {}
		if dir := os.Getenv("TEXTGEN_BENCH_PROFILE"); dir != "" {
			// With every stream open, a third of the way in: the heap (pprof) and the process's
			// MemStats (stacks, heap in use and idle), to see where a stream's memory goes; then
			// 10 s of CPU profile, to see where a piece's CPU goes.
			srv, name := p.srv, p.name
			atPeak = func() {
				time.Sleep(time.Duration(pieces) * gap / 3)
				saveAdmin(b, srv.Admin, "/debug/pprof/heap", filepath.Join(dir, name+"-streams.heap"))
				saveAdmin(b, srv.Admin, "/debug/pprof/heap?debug=1", filepath.Join(dir, name+"-streams.heap.txt"))
				saveAdmin(b, srv.Admin, "/debug/pprof/goroutine?debug=1", filepath.Join(dir, name+"-streams.goroutines.txt"))
				saveAdmin(b, srv.Admin, "/debug/pprof/profile?seconds=10", filepath.Join(dir, name+"-streams.cpu"))
			}
		}
		res := runLongStreams(b, p.srv.Pid(), n, atPeak, func() ([]time.Duration, error) {
			resp, err := client.Do(p.req())
			if err != nil {
				return nil, err
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				return nil, fmt.Errorf("status %d", resp.StatusCode)
			}
			// The gaps between reads that brought text: a read brings what has arrived, so two
			// pieces that came together count as one arrival, as a client sees them.
			var body []byte
			var gaps []time.Duration
			buf := make([]byte, 512)
			last := time.Now()
			for {
				k, err := resp.Body.Read(buf)
				if k > 0 {
					t := time.Now()
					if len(body) > 0 {
						gaps = append(gaps, t.Sub(last))
					}
					last = t
					body = append(body, buf[:k]...)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					return nil, err
				}
			}
			return gaps, p.check(body)
		})
		if res.failed > 0 {
			b.Errorf("%s: %d of %d streams failed (first: %v)", p.name, res.failed, n, res.firstErr)
		}
		b.ReportMetric(float64(res.failed), p.name+"-streams-failed")
		b.ReportMetric(res.gapP99.Seconds()*1000, p.name+"-gap-p99-ms")
		b.ReportMetric((res.gapP99-gap).Seconds()*1000, p.name+"-gap-p99-over-backend-ms")
		b.ReportMetric(float64(res.peakRSS)/(1<<20), p.name+"-peak-rss-MB")
		b.ReportMetric(float64(res.peakRSS-res.baseRSS)/float64(n)/1024, p.name+"-rss-KB/stream")
		b.ReportMetric(float64(res.cpu.Microseconds())/float64(n*pieces), p.name+"-cpu-us/piece")
		b.Logf("%s: %d streams of %d pieces %v apart: %d failed; gap between pieces p50/p99/max %v/%v/%v (backend's %v); caddy RSS %.0f MB before, %.0f MB peak (%.1f KB a stream); caddy CPU %.1f us a piece",
			p.name, n, pieces, gap, res.failed, res.gapP50.Round(time.Millisecond), res.gapP99.Round(time.Millisecond), res.gapMax.Round(time.Millisecond), gap,
			float64(res.baseRSS)/(1<<20), float64(res.peakRSS)/(1<<20), float64(res.peakRSS-res.baseRSS)/float64(n)/1024,
			float64(res.cpu.Microseconds())/float64(n*pieces))
		client.CloseIdleConnections()
	}
	if bal := tg.JSON("balance", "--account", acct); caddyproc.Num(b, bal, "balance") != 0 {
		b.Errorf("balance after %d generations of %d credits: %v", n, n, bal)
	}
	if v := tg.JSON("ledger", "verify"); !caddyproc.Bool(b, v, "ok") {
		b.Errorf("ledger verify: %v", v)
	}
}

// longStreamsSite is the textgen site of the long-stream benchmarks: every limit that would
// refuse thousands of generations of one account at once is off.
func longStreamsSite(ledger, backend string) string {
	return fmt.Sprintf(`textgen /api/* {
		ledger %s
		ollama %s
		model tiny
		max_concurrent_per_account off
		max_in_flight off
		rate_limit key off
		rate_limit account off
		generation_timeout 10m
	}`, ledger, backend)
}

// longStreamsResult is what runLongStreams measured of one path.
type longStreamsResult struct {
	failed                 int
	firstErr               error
	gapP50, gapP99, gapMax time.Duration
	baseRSS, peakRSS       int64
	cpu                    time.Duration // the server process's
}

// runLongStreams runs n streams at once (started over about a second, as a listen backlog
// takes them) and samples the server process pid's RSS while they run.
func runLongStreams(b *testing.B, pid, n int, atPeak func(), stream func() ([]time.Duration, error)) longStreamsResult {
	res := longStreamsResult{baseRSS: rssOf(pid)}
	cpu0 := procCPU(b, pid)
	peakRSS := samplePeakRSS(pid, 100*time.Millisecond)
	var mu sync.Mutex
	var gaps []time.Duration
	var wg sync.WaitGroup
	pace := time.NewTicker(time.Second / 10000)
	for i := 0; i < n; i++ {
		<-pace.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := stream()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.failed++
				if res.firstErr == nil {
					res.firstErr = err
				}
			}
			gaps = append(gaps, g...)
		}()
	}
	pace.Stop()
	atPeak()
	wg.Wait()
	res.cpu = procCPU(b, pid) - cpu0
	res.peakRSS = peakRSS()
	if len(gaps) > 0 {
		slices.Sort(gaps)
		res.gapP50, res.gapP99, res.gapMax = gaps[len(gaps)/2], gaps[len(gaps)*99/100], gaps[len(gaps)-1]
	}
	return res
}

// saveAdmin writes what path of the admin endpoint admin answers to file.
func saveAdmin(b *testing.B, admin, path, file string) {
	resp, err := http.Get("http://" + admin + path)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		b.Fatal(err)
	}
}

// raiseFileLimit raises this process's open-file limit to its hard limit (processes it starts
// inherit it) and returns it.
func raiseFileLimit(b testing.TB) uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		b.Fatal(err)
	}
	// Above the hard limit where the process may (root, or CAP_SYS_RESOURCE), else up to it.
	want := syscall.Rlimit{Cur: max(l.Max, 1<<16), Max: max(l.Max, 1<<16)}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
		return want.Cur
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		b.Fatal(err)
	}
	return l.Cur
}

// procCPU is the CPU time (user and system) process pid has used, from /proc/PID/stat.
func procCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // clock ticks: USER_HZ is 100 on Linux
}

// envInt reads a positive integer from the environment, or def.
func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	i, err := strconv.Atoi(v)
	if err != nil || i <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return i
}

// BenchmarkStreamsSteady holds the long-stream load for a long time (memory must stay
// flat): TEXTGEN_BENCH_STREAMS clients (default 2,000) each run one generation of 60 pieces
// 500 ms apart after another, for TEXTGEN_BENCH_STEADY (default 10m), through one caddy process
// with textgen (retention on, durable charging). Every 10 s it samples the process's RSS and
// Go heap in use (the admin endpoint's /debug/pprof/heap); it reports the highest of each in
// the second and in the last fifth of the run and their ratio (1.0: flat), after the first
// fifth has warmed every pool up.
//
//	go test ./caddymodule -run '^$' -bench BenchmarkStreamsSteady -benchtime 1x -timeout 30m
func BenchmarkStreamsSteady(b *testing.B) {
	n := envInt(b, "TEXTGEN_BENCH_STREAMS", 2000)
	steady := 10 * time.Minute
	if v := os.Getenv("TEXTGEN_BENCH_STEADY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("TEXTGEN_BENCH_STEADY: %v", err)
		}
		steady = d
	}
	const pieces, gap = 60, 500 * time.Millisecond
	if limit := raiseFileLimit(b); uint64(2*n+300) > limit {
		b.Fatalf("the open-file limit %d is too low for %d streams", limit, n)
	}
	fs := ollamatest.NewFaultServerT(b, ollamatest.FaultConfig{Pieces: pieces, Piece: "s", Numbered: true, Delay: gap})
	ledger := ledgerDir(b)
	srv := caddyproc.Start(b, longStreamsSite(ledger, fs.URL), ledger)
	acct := caddyproc.Str(b, srv.JSON("account", "create", "--email", "steady@example.com"), "id")
	key := caddyproc.Str(b, srv.JSON("key", "create", "--account", acct, "--name", "bench"), "key")
	srv.JSON("credits", "grant", "--account", acct, "--credits", "100000000", "--reference", "bench")
	var want strings.Builder
	for i := 0; i < pieces; i++ {
		want.WriteString("s" + strconv.Itoa(i) + " ")
	}
	body := []byte(genBody("email-writer", "Write it.", "en", ""))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxIdleConns: n, DisableCompression: true}}
	one := func() error {
		r, _ := http.NewRequest("POST", "http://"+srv.HTTP+"/api/v1/generate", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-API-Key", key)
		resp, err := client.Do(r)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || string(got) != want.String() {
			return fmt.Errorf("status %d, %d bytes, %v", resp.StatusCode, len(got), err)
		}
		return nil
	}

	type sample struct {
		at                     time.Duration
		rss, anon, heap, files int64
	}
	var samples []sample
	start := time.Now()
	end := start.Add(steady)
	var done, failed atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * time.Millisecond) // a ramp, as a listen backlog takes it
			for time.Now().Before(end) {
				if err := one(); err != nil {
					failed.Add(1)
				}
				done.Add(1)
			}
		}()
	}
	stop := make(chan struct{})
	go func() { wg.Wait(); close(stop) }()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-stop:
			running = false
		case <-tick.C:
			pid := srv.Pid()
			samples = append(samples, sample{at: time.Since(start), rss: rssOf(pid), anon: statusKB(pid, "RssAnon"),
				heap: heapInUse(srv.Admin), files: openFiles(pid)})
		}
	}
	if failed.Load() > 0 {
		b.Errorf("%d of %d generations failed", failed.Load(), done.Load())
	}
	peak := func(from, to float64) (rss, anon, heap, files int64) {
		for _, s := range samples {
			if f := float64(s.at) / float64(steady); f >= from && f < to {
				rss, anon, heap, files = max(rss, s.rss), max(anon, s.anon), max(heap, s.heap), max(files, s.files)
			}
		}
		return
	}
	r2, a2, h2, f2 := peak(0.2, 0.4)
	r5, a5, h5, f5 := peak(0.8, 1.01)
	if r2 == 0 || h2 == 0 {
		b.Fatalf("too few samples (%d) for a run of %v", len(samples), steady)
	}
	b.ReportMetric(float64(done.Load()), "generations")
	b.ReportMetric(float64(r5)/float64(r2), "rss-last/second-fifth")
	b.ReportMetric(float64(h5)/float64(h2), "heap-last/second-fifth")
	// RSS counts the pages of Badger's memory-mapped files the process has touched, which grow
	// with the ledger; anonymous memory (the Go heap, stacks) and open files are what a leak
	// would grow.
	b.ReportMetric(float64(a5)/float64(a2), "anon-rss-last/second-fifth")
	b.ReportMetric(float64(f5)/float64(f2), "open-files-last/second-fifth")
	b.Logf("%d generations by %d clients over %v, %d failed; peak RSS %.0f MB in the second fifth, %.0f MB in the last (%.2f); Go heap in use %.0f / %.0f MB (%.2f)",
		done.Load(), n, steady, failed.Load(), float64(r2)/(1<<20), float64(r5)/(1<<20), float64(r5)/float64(r2),
		float64(h2)/(1<<20), float64(h5)/(1<<20), float64(h5)/float64(h2))
	b.Logf("anonymous RSS %.0f / %.0f MB (%.2f); open files %d / %d", float64(a2)/(1<<20), float64(a5)/(1<<20),
		float64(a5)/float64(a2), f2, f5)
	// One line (benchmark logs are cut after a few lines): a sample a minute.
	var line strings.Builder
	for i, s := range samples {
		if i%6 == 5 {
			fmt.Fprintf(&line, " %v %.0f/%.0f/%.0f/%d", s.at.Round(time.Minute), float64(s.rss)/(1<<20),
				float64(s.anon)/(1<<20), float64(s.heap)/(1<<20), s.files)
		}
	}
	b.Logf("RSS/anonymous RSS/heap in use (MB)/open files over the run:%s", line.String())
	if v := srv.JSON("ledger", "verify"); !caddyproc.Bool(b, v, "ok") {
		b.Errorf("ledger verify: %v", v)
	}
}

// statusKB reads one "kB" line of /proc/PID/status (VmRSS, RssAnon, RssFile), in bytes.
func statusKB(pid int, field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// openFiles counts the open file descriptors of process pid.
func openFiles(pid int) int64 {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	return int64(len(fds))
}

// heapInUse reads the Go heap in use of the caddy process whose admin endpoint is admin.
func heapInUse(admin string) int64 {
	resp, err := http.Get("http://" + admin + "/debug/pprof/heap?debug=1")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "# HeapInuse = "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
