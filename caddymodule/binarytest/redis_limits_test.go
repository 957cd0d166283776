package binarytest

// Limits shared by several Caddy instances through Redis: real caddy processes, a real
// PostgreSQL ledger they share (ledger/pgtest), a real redis-server (internal/redistest), the
// fault server as the model (instant or paced answers).

import (
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
	"github.com/caddy-textgen/textgen/caddymodule/internal/redistest"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// redisSite is a site block whose textgen handler shares its ledger (url) and its limits
// (redisURL) with the other instances; limits are the limit lines.
func redisSite(url, redisURL, model, limits string) string {
	return fmt.Sprintf("textgen {\n\t\tledger %s\n\t\tollama %s\n\t\tmodel tiny\n\t\tlimits_store %s\n%s\t}", url, model, redisURL, limits)
}

// sharedSetup is a ledger, a Redis, a model and an account with credits and a key.
type sharedSetup struct {
	url   string
	redis *redistest.Server
	fs    *ollamatest.FaultServer
}

func newSharedSetup(t *testing.T) *sharedSetup {
	return &sharedSetup{
		url:   pgtest.NewDatabase(t),
		redis: redistest.New(t),
		fs:    ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "tok "}),
	}
}

func (s *sharedSetup) start(t *testing.T, limits string) *caddyproc.Server {
	return caddyproc.Start(t, redisSite(s.url, s.redis.URL(0), s.fs.URL, limits), s.url)
}

// newKey creates an account with credits and a key through instance a.
func newKey(t *testing.T, a *caddyproc.Server, email string, credits int) (acct, key string) {
	acct = caddyproc.Str(t, a.JSON("account", "create", "--email", email), "id")
	key = caddyproc.Str(t, a.JSON("key", "create", "--account", acct), "key")
	a.JSON("credits", "grant", "--account", acct, "--credits", fmt.Sprint(credits), "--reference", email)
	return acct, key
}

// burst sends n requests at once, alternately to each server, and counts the answers by status.
func burst(t *testing.T, servers []*caddyproc.Server, n int, key, body string) map[int]int {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	var mu sync.Mutex
	got := map[int]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, _, _, err := postTo(client, servers[i%len(servers)].HTTP, key, body)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			got[status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return got
}

// TestSharedLimitsAcrossInstances: two instances sharing a Redis. The RateLimit header of each
// reports the shared count; a key limit of 20 an hour lets exactly 20 through in all from a burst
// of 100 sent to both (and exactly 20 are charged); the failed-authentication limit of 5 holds
// across both; a restart of an instance keeps the counts. (An hour's window: no request comes
// back while the test runs.)
func TestSharedLimitsAcrossInstances(t *testing.T) {
	s := newSharedSetup(t)
	limits := "\t\trate_limit key 20/1h\n\t\trate_limit account off\n\t\tauth_failure_limit 5/1h\n\t\tmax_concurrent_per_account 1000\n"
	a, b := s.start(t, limits), s.start(t, limits)
	acct, key := newKey(t, a, "shared@example.com", 1000)

	client := &http.Client{}
	for i, srv := range []*caddyproc.Server{a, b} {
		status, _, h, err := postTo(client, srv.HTTP, key, genBody("summarizer", "x", "en", ""))
		if err != nil || status != 200 || !strings.HasPrefix(h.Get("RateLimit"), fmt.Sprintf(`"key";r=%d;`, 19-i)) {
			t.Fatalf("request %d: %d %v, RateLimit %q", i+1, status, err, h.Get("RateLimit"))
		}
	}
	got := burst(t, []*caddyproc.Server{a, b}, 100, key, genBody("summarizer", "x", "en", ""))
	if got[200] != 18 || got[429] != 82 {
		t.Fatalf("a burst of 100 over two instances with a key limit of 20, 2 used: %v, want 18 x 200 and 82 x 429", got)
	}
	if v := caddyproc.Num(t, b.JSON("balance", "--account", acct), "balance"); v != 1000-20 {
		t.Fatalf("balance %d, want %d: exactly the 20 served are charged", v, 1000-20)
	}

	// Failed authentications from one address, alternately to both: 5 are answered 401, then
	// the address is refused 429 by both, whatever key it sends.
	var statuses []int
	for i := range 12 {
		status, _, _, err := postTo(client, []*caddyproc.Server{a, b}[i%2].HTTP, "tg_live_not-a-key", genBody("summarizer", "x", "en", ""))
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, status)
	}
	want := []int{401, 401, 401, 401, 401, 429, 429, 429, 429, 429, 429, 429}
	if fmt.Sprint(statuses) != fmt.Sprint(want) {
		t.Fatalf("failed authentications over two instances: %v, want %v", statuses, want)
	}

	// A restart keeps the counts: they live in Redis.
	a.Stop()
	a2 := s.start(t, limits)
	if status, _, _, _ := postTo(client, a2.HTTP, key, genBody("summarizer", "x", "en", "")); status != 429 {
		t.Fatalf("after a restart the key's used-up limit answered %d, want 429", status)
	}
	if status, _, _, _ := postTo(client, a2.HTTP, "tg_live_not-a-key", genBody("summarizer", "x", "en", "")); status != 429 {
		t.Fatalf("after a restart the address's used-up failure limit answered %d, want 429", status)
	}
}

// openStreams starts n generations alternately on servers and returns the count of each status
// (the 429s are checked to be too_many_concurrent_requests); the streams answered 200 stay open
// until stop is closed.
func openStreams(t *testing.T, servers []*caddyproc.Server, n int, key string, stop <-chan struct{}) map[int]int {
	t.Helper()
	var mu sync.Mutex
	got := map[int]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, "http://"+servers[i%len(servers)].HTTP+"/api/v1/generate",
				strings.NewReader(genBody("summarizer", "x", "en", "")))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-API-Key", key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				wg.Done()
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			body := make([]byte, 64)
			nr, _ := io.ReadAtLeast(resp.Body, body, 1)
			if resp.StatusCode == 429 && !strings.Contains(string(body[:nr])+readAll(resp.Body), "too_many_concurrent_requests") {
				t.Errorf("a 429 that is not too_many_concurrent_requests: %s", body[:nr])
			}
			mu.Lock()
			got[resp.StatusCode]++
			mu.Unlock()
			wg.Done()
			if resp.StatusCode == 200 {
				go func() { <-stop; resp.Body.Close() }()
				io.Copy(io.Discard, resp.Body)
			}
		}()
	}
	wg.Wait()
	return got
}

func readAll(r io.Reader) string {
	b, _ := io.ReadAll(r)
	return string(b)
}

// TestSharedConcurrencyCap: a cap of 4 concurrent generations per account holds across two
// instances; when an instance holding places is killed (SIGKILL), its places come back within
// the slot expiry, and not before the other instance's own streams end.
func TestSharedConcurrencyCap(t *testing.T) {
	s := newSharedSetup(t)
	// Streams of 1,000 pieces 20 ms apart: they stay open for the whole test.
	s.fs.Set(ollamatest.FaultConfig{Pieces: 1000, Piece: "slow ", Delay: 20 * time.Millisecond})
	limits := "\t\trate_limit key off\n\t\trate_limit account off\n\t\tmax_concurrent_per_account 4\n\t\tslot_expiry 3s\n\t\tgeneration_timeout 2m\n"
	a, b := s.start(t, limits), s.start(t, limits)
	_, key := newKey(t, a, "cap@example.com", 100)

	stopA := make(chan struct{})
	if got := openStreams(t, []*caddyproc.Server{a, b}, 10, key, stopA); got[200] != 4 || got[429] != 6 {
		t.Fatalf("10 generations at once over two instances with a cap of 4: %v; want 4 x 200 and 6 x 429", got)
	}
	defer close(stopA)

	// Kill a. Its places stay taken until they expire (3 s), then b may run as many as are
	// free; b's own streams still count. How the 4 places were split between a and b is up to
	// the race above: b's open holds say how many are a's, and b takes exactly those back.
	ofA := 4 - int(metric(t, b, "caddy_textgen_holds_open"))
	a.Kill()
	stopB := make(chan struct{})
	defer close(stopB)
	deadline := time.Now().Add(time.Minute)
	var got int
	for got < ofA {
		got += openStreams(t, []*caddyproc.Server{b}, 1, key, stopB)[200]
		if time.Now().After(deadline) {
			t.Fatalf("the killed instance's places never came back: %d of %d", got, ofA)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// b now runs its own streams plus the freed places: never more than 4 in all.
	if got := openStreams(t, []*caddyproc.Server{b}, 3, key, stopB); got[429] != 3 {
		t.Fatalf("after the expiry: %v; want 3 x 429: the cap of 4 holds", got)
	}
}

// metric reads one caddy_textgen_ series from a server's metrics (its admin endpoint).
func metric(t testing.TB, s *caddyproc.Server, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + s.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return parseMetrics(t, resp)[series]
}

// TestSharedLimitsRedisDown: Redis stopped under load: requests go on under each instance's own
// limits, the metric shows the fallback, and every request answered 200 is charged once and no
// other; Redis started again: the limits are shared again without a restart.
func TestSharedLimitsRedisDown(t *testing.T) {
	s := newSharedSetup(t)
	limits := "\t\trate_limit key 1000/1m\n\t\trate_limit account off\n\t\tmax_concurrent_per_account 100\n\t\tmax_in_flight 100\n\t\tqueue_size 100\n" +
		"\t\ttool email-writer {\n\t\t\trate_limit key 20/1m\n\t\t}\n"
	a, b := s.start(t, limits), s.start(t, limits)
	acct, key := newKey(t, a, "down@example.com", 100_000)

	var served, other atomic.Int64
	var firstOther atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				status, text, _, err := postTo(client, []*caddyproc.Server{a, b}[(w+i)%2].HTTP, key, genBody("summarizer", "x", "en", ""))
				switch {
				case err == nil && status == 200 && text == "tok tok tok ":
					served.Add(1)
				case err == nil && status == 429: // a limit: fine under load, never charged
				default:
					other.Add(1)
					firstOther.CompareAndSwap(nil, fmt.Sprintf("%d %q %v", status, text, err))
				}
			}
		}()
	}
	waitFor(t, "requests to flow", func() bool { return served.Load() > 50 })
	if err := s.redis.Stop(); err != nil {
		t.Fatal(err)
	}
	before := served.Load()
	waitFor(t, "both instances to fall back", func() bool {
		return metric(t, a, "caddy_textgen_limits_store_unavailable") == 1 && metric(t, b, "caddy_textgen_limits_store_unavailable") == 1
	})
	waitFor(t, "requests to flow without Redis", func() bool { return served.Load() > before+100 })
	if metric(t, a, "caddy_textgen_limits_fallback_total") == 0 {
		t.Fatal("no fallback counted")
	}
	if err := s.redis.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both instances to share their limits again", func() bool {
		return metric(t, a, "caddy_textgen_limits_store_unavailable") == 0 && metric(t, b, "caddy_textgen_limits_store_unavailable") == 0
	})
	close(stop)
	wg.Wait()
	if other.Load() != 0 {
		t.Fatalf("%d answers neither 200 nor 429 (first: %v)", other.Load(), firstOther.Load())
	}
	waitFor(t, "every charge to settle", func() bool {
		bal := a.JSON("balance", "--account", acct)
		return caddyproc.Num(t, bal, "available") == caddyproc.Num(t, bal, "balance")
	})
	if v := caddyproc.Num(t, b.JSON("balance", "--account", acct), "balance"); v != 100_000-served.Load() {
		t.Fatalf("balance %d after %d requests served: want exactly one credit each", v, served.Load())
	}

	// Shared again: the email-writer's limit of 20 a minute per key lets exactly 20 of a burst
	// of 100 over both instances through.
	got := burst(t, []*caddyproc.Server{a, b}, 100, key, genBody("email-writer", "x", "en", ""))
	if got[200] != 20 || got[429] != 80 {
		t.Fatalf("after Redis came back, a burst of 100 against 20 a minute: %v", got)
	}
	for _, srv := range []*caddyproc.Server{a, b} {
		if v := srv.JSON("ledger", "verify"); !caddyproc.Bool(t, v, "ok") {
			t.Fatalf("verify: %v", v)
		}
	}
}

// TestSharedLimitsRedisDownShared: while Redis is down, the two instances together allow no
// more than a limit: each counts its share (20 a key: 10 each), where each alone used to allow
// the whole limit (40 in all). The instances count each other while Redis answers.
func TestSharedLimitsRedisDownShared(t *testing.T) {
	s := newSharedSetup(t)
	// An hour's window: no request is restored while the burst runs, however slow the machine.
	limits := "\t\trate_limit key 20/1h\n\t\trate_limit account off\n\t\tmax_concurrent_per_account 1000\n"
	a, b := s.start(t, limits), s.start(t, limits)
	_, key := newKey(t, a, "share@example.com", 1000)
	waitFor(t, "the two instances to count each other", func() bool {
		return metric(t, a, "caddy_textgen_limits_instances") == 2 && metric(t, b, "caddy_textgen_limits_instances") == 2
	})
	if err := s.redis.Stop(); err != nil {
		t.Fatal(err)
	}
	got := burst(t, []*caddyproc.Server{a, b}, 100, key, genBody("summarizer", "x", "en", ""))
	if got[200] != 20 || got[429] != 80 {
		t.Fatalf("Redis down, a burst of 100 over two instances against 20 an hour: %v, want 20 x 200 (10 each) and 80 x 429", got)
	}
	if metric(t, a, "caddy_textgen_limits_fallback_total") == 0 || metric(t, b, "caddy_textgen_limits_fallback_total") == 0 {
		t.Fatal("the burst was not counted in memory on both instances")
	}
	if metric(t, a, "caddy_textgen_limits_instances") != 2 {
		t.Fatal("while Redis is down an instance forgot how many share it")
	}
}

// TestSharedMaxInFlight: max_in_flight holds for the model host across two instances: with 2
// places and no queue, 2 of 6 generations sent at once to both run and the others are refused
// 503 overloaded (charged nothing); a place given back is free for either instance.
func TestSharedMaxInFlight(t *testing.T) {
	s := newSharedSetup(t)
	s.fs.Set(ollamatest.FaultConfig{Pieces: 1000, Piece: "slow ", Delay: 20 * time.Millisecond})
	limits := "\t\trate_limit key off\n\t\trate_limit account off\n\t\tmax_concurrent_per_account 100\n\t\tmax_in_flight 2\n\t\tqueue_size off\n\t\tgeneration_timeout 2m\n"
	a, b := s.start(t, limits), s.start(t, limits)
	acct, key := newKey(t, a, "inflight@example.com", 100)

	stop := make(chan struct{})
	got := openStreams(t, []*caddyproc.Server{a, b}, 6, key, stop)
	if got[200] != 2 || got[503] != 4 {
		t.Fatalf("6 generations over two instances on a host with max_in_flight 2: %v, want 2 x 200 and 4 x 503", got)
	}
	if v := caddyproc.Num(t, b.JSON("balance", "--account", acct), "available"); v != 98 {
		t.Fatalf("available %d, want 98: only the two running hold a credit", v)
	}
	close(stop)
	// Both places free again (the cut streams end on the server a moment later).
	s.fs.Set(ollamatest.FaultConfig{Pieces: 3, Piece: "tok "})
	waitFor(t, "the places to come back", func() bool {
		st, _, _, _ := postTo(&http.Client{}, b.HTTP, key, genBody("summarizer", "x", "en", ""))
		return st == 200
	})
}
