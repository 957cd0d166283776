package binarytest

// Several Caddy instances on one PostgreSQL ledger: real caddy processes, a real PostgreSQL
// server (ledger/pgtest), the fault server as the model (instant answers, so that the ledger is
// what the tests load).

import (
	"context"
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
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// pgSite is a site block whose textgen handler keeps its ledger in the database at url, with
// the limits out of reach (these tests load the ledger, not the limits).
func pgSite(url, model, extra string) string {
	return fmt.Sprintf("textgen {\n\t\tledger %s\n\t\tollama %s\n\t\tmodel tiny\n\t\trate_limit key off\n\t\trate_limit account off\n\t\tauth_failure_limit off\n\t\tmax_concurrent_per_account 1000\n\t\tmax_in_flight 1000\n\t\tqueue_size 1000\n%s\t}", url, model, extra)
}

// post sends one generate request to addr and returns the status, the body and the headers.
func postTo(client *http.Client, addr, key, body string, hdr ...string) (int, string, http.Header, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/generate", strings.NewReader(body))
	if err != nil {
		return 0, "", nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header, err
}

// TestTwoInstancesSpendEachCreditOnce: 10,000 generate requests spread over two Caddy
// instances, against an account with 1,000 credits: exactly 1,000 are answered 200 and charged,
// the rest 402 (or 503 ledger_unavailable, charged nothing, where a slow machine's database
// missed the query timeout); the available credits, sampled all along through the other
// instance, never go below 0; the ledger verifies clean. Then Idempotency-Key retries sent to the other instance
// replay the first result and charge nothing.
func TestTwoInstancesSpendEachCreditOnce(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "tok "})
	a := caddyproc.Start(t, pgSite(url, fs.URL, ""), url)
	b := caddyproc.Start(t, pgSite(url, fs.URL, ""), url)
	acct := caddyproc.Str(t, a.JSON("account", "create", "--email", "two@example.com"), "id")
	key := caddyproc.Str(t, b.JSON("key", "create", "--account", acct), "key")
	a.JSON("credits", "grant", "--account", acct, "--credits", "1000", "--reference", "two-instances")

	const total, workers = 10_000, 64
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	var next, ok, broke, unavailable, other atomic.Int64
	var firstOther atomic.Value
	var remMu sync.Mutex
	remaining := map[string]int{} // X-Credits-Remaining of the answers 200
	body := genBody("summarizer", "x", "en", "")
	stop := make(chan struct{})
	var minSeen atomic.Int64
	minSeen.Store(1 << 40)
	sampled := make(chan struct{})
	var samples, sampleFailures atomic.Int64
	var firstSampleFailure atomic.Value
	go func() { // the available credits, read through the other instance while requests run
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			// A sample the loaded server could not answer in time is counted, not fatal: this
			// goroutine may not end the test, and the check is of the values it reads.
			res := b.Textgen("balance", "--account", acct, "--json")
			var bal struct{ Available *int64 }
			if err := json.Unmarshal([]byte(res.Stdout), &bal); res.Code != 0 || err != nil || bal.Available == nil {
				sampleFailures.Add(1)
				firstSampleFailure.CompareAndSwap(nil, res.String())
				continue
			}
			samples.Add(1)
			if v := *bal.Available; v < minSeen.Load() {
				minSeen.Store(v)
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > total {
					return
				}
				addr := a.HTTP
				if (i+int64(w))%2 == 0 {
					addr = b.HTTP
				}
				status, text, h, err := postTo(client, addr, key, body)
				switch {
				case err == nil && status == http.StatusOK && text == "tok tok tok ":
					ok.Add(1)
					remMu.Lock()
					remaining[h.Get("X-Credits-Remaining")]++
					remMu.Unlock()
				case err == nil && status == http.StatusPaymentRequired:
					broke.Add(1)
				case err == nil && status == http.StatusServiceUnavailable && strings.Contains(text, `"ledger_unavailable"`):
					// The database did not answer within the query timeout (a slow machine's
					// disk): refused, charged nothing. Allowed; the credits must still add up.
					unavailable.Add(1)
				default:
					other.Add(1)
					firstOther.CompareAndSwap(nil, fmt.Sprintf("%d %q %v", status, text, err))
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	if ok.Load() != 1000 || broke.Load()+unavailable.Load() != total-1000 || other.Load() != 0 {
		t.Fatalf("%d requests over two instances against 1000 credits: %d x 200, %d x 402, %d x 503 ledger_unavailable, %d other (first: %v)",
			total, ok.Load(), broke.Load(), unavailable.Load(), other.Load(), firstOther.Load())
	}
	if n := unavailable.Load(); n > 0 {
		t.Logf("%d requests answered 503 ledger_unavailable under the load, charged nothing", n)
	}
	if samples.Load() == 0 {
		t.Fatalf("no balance sample answered during the load (%d failed; first: %v)", sampleFailures.Load(), firstSampleFailure.Load())
	}
	if n := sampleFailures.Load(); n > 0 {
		t.Logf("%d of %d balance samples failed under the load (first: %v)", n, n+samples.Load(), firstSampleFailure.Load())
	}
	if minSeen.Load() < 0 {
		t.Fatalf("available credits went down to %d", minSeen.Load())
	}
	// X-Credits-Remaining is the account's available credits over both instances right after
	// each hold: the 1,000 answers carry 999, 998, ... 0, each exactly once.
	for i := range 1000 {
		if n := remaining[fmt.Sprint(i)]; n != 1 {
			t.Fatalf("X-Credits-Remaining %d was reported %d times over both instances, want once", i, n)
		}
	}
	bal := a.JSON("balance", "--account", acct)
	if v, av := caddyproc.Num(t, bal, "balance"), caddyproc.Num(t, bal, "available"); v != 0 || av != 0 {
		t.Fatalf("balance %d, available %d after spending everything; want 0 and 0", v, av)
	}

	// Idempotency-Key retries of requests that ran on one instance, sent to the other: the
	// first result is replayed, nothing is generated or charged again.
	a.JSON("credits", "grant", "--account", acct, "--credits", "20", "--reference", "two-instances-2")
	for i := range 20 {
		k := fmt.Sprint("order-", i)
		first, second := a, b
		if i%2 == 1 {
			first, second = b, a
		}
		status, text, h, err := postTo(client, first.HTTP, key, body, "Idempotency-Key", k)
		if err != nil || status != http.StatusOK || text != "tok tok tok " {
			t.Fatalf("first request %s: %d %q %v", k, status, text, err)
		}
		rid := h.Get("X-Request-Id")
		status, text, h, err = postTo(client, second.HTTP, key, body, "Idempotency-Key", k)
		if err != nil || status != http.StatusOK || h.Get("Idempotent-Replayed") != "true" || !strings.Contains(text, rid) ||
			h.Get("X-Credits-Used") != "0" {
			t.Fatalf("retry of %s on the other instance: %d %q %v %v; want a replay of %s", k, status, text, h, err, rid)
		}
	}
	bal = b.JSON("balance", "--account", acct)
	if v := caddyproc.Num(t, bal, "available"); v != 0 {
		t.Fatalf("available %d after 20 requests and 20 replays of 20 credits; want 0", v)
	}
	for _, s := range []*caddyproc.Server{a, b} {
		if v := s.JSON("ledger", "verify"); !caddyproc.Bool(t, v, "ok") {
			t.Fatalf("verify: %v", v)
		}
	}
}

// TestInstanceKilledOthersServe: one instance is killed (SIGKILL) with streams open; the other
// keeps serving, and voids the cut streams' holds once their hold_ttl has passed (its sweep),
// so they are charged nothing; a key revoked through the survivor is refused at once, and the
// ledger verifies clean.
func TestInstanceKilledOthersServe(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "tok "})
	fs.Set(ollamatest.FaultConfig{Model: "slow", Pieces: 1000, Piece: "slow ", Delay: 10 * time.Millisecond})
	extra := "\t\tgeneration_timeout 4s\n\t\tqueue_timeout 1s\n\t\thold_ttl 8s\n\t\ttool summarizer {\n\t\t\tmodel slow\n\t\t}\n"
	a := caddyproc.Start(t, pgSite(url, fs.URL, extra), url)
	b := caddyproc.Start(t, pgSite(url, fs.URL, extra), url)
	acct := caddyproc.Str(t, a.JSON("account", "create", "--email", "kill@example.com"), "id")
	key := caddyproc.Str(t, a.JSON("key", "create", "--account", acct), "key")
	a.JSON("credits", "grant", "--account", acct, "--credits", "50", "--reference", "kill-one")

	const streams = 8
	var opened sync.WaitGroup
	var ended sync.WaitGroup
	for range streams {
		opened.Add(1)
		ended.Add(1)
		go func() {
			defer ended.Done()
			req, _ := http.NewRequest(http.MethodPost, "http://"+a.HTTP+"/api/v1/generate", strings.NewReader(genBody("summarizer", "x", "en", "")))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-API-Key", key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				opened.Done()
				t.Errorf("stream: %v", err)
				return
			}
			defer resp.Body.Close()
			io.ReadFull(resp.Body, make([]byte, 5))
			opened.Done()
			io.Copy(io.Discard, resp.Body)
		}()
	}
	opened.Wait()
	if v := caddyproc.Num(t, b.JSON("balance", "--account", acct), "available"); v != 50-streams {
		t.Fatalf("available %d with %d streams open on the other instance, want %d", v, streams, 50-streams)
	}
	a.Kill()
	ended.Wait()

	// The survivor serves (the fast tool), and its sweep voids the dead instance's holds.
	client := &http.Client{}
	if status, text, _, err := postTo(client, b.HTTP, key, genBody("email-writer", "x", "en", "")); err != nil || status != 200 || text != "tok tok tok " {
		t.Fatalf("the surviving instance: %d %q %v", status, text, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		bal := b.JSON("balance", "--account", acct)
		if caddyproc.Num(t, bal, "available") == 49 {
			if v := caddyproc.Num(t, bal, "balance"); v != 49 {
				t.Fatalf("balance %d: the cut streams were charged", v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead instance's holds were not voided: %v", bal)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Revocation through the survivor takes effect on the next request there.
	keys := caddyproc.List(t, b.JSON("key", "list", "--account", acct), "keys")
	b.JSON("key", "revoke", "--account", acct, "--key-id", keys[0]["id"].(string))
	if status, _, _, _ := postTo(client, b.HTTP, key, genBody("email-writer", "x", "en", "")); status != http.StatusUnauthorized {
		t.Fatalf("a revoked key: %d, want 401", status)
	}
	if v := b.JSON("ledger", "verify"); !caddyproc.Bool(t, v, "ok") {
		t.Fatalf("verify: %v", v)
	}
}

// TestRevokedOnOneInstanceRefusedByOther: a key revoked through one instance's admin API is
// refused by the other instance on its very next request, and an account disabled through one
// is refused (403) by the other.
func TestRevokedOnOneInstanceRefusedByOther(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "tok "})
	a := caddyproc.Start(t, pgSite(url, fs.URL, ""), url)
	b := caddyproc.Start(t, pgSite(url, fs.URL, ""), url)
	acct := caddyproc.Str(t, a.JSON("account", "create", "--email", "revoke@example.com"), "id")
	created := a.JSON("key", "create", "--account", acct)
	key, keyID := caddyproc.Str(t, created, "key"), caddyproc.Str(t, created, "id")
	other := caddyproc.Str(t, a.JSON("key", "create", "--account", acct), "key")
	a.JSON("credits", "grant", "--account", acct, "--credits", "10", "--reference", "revoke")
	client := &http.Client{}
	body := genBody("summarizer", "x", "en", "")
	if status, _, _, _ := postTo(client, b.HTTP, key, body); status != http.StatusOK {
		t.Fatalf("before the revocation: %d", status)
	}
	a.JSON("key", "revoke", "--account", acct, "--key-id", keyID)
	if status, _, _, _ := postTo(client, b.HTTP, key, body); status != http.StatusUnauthorized {
		t.Fatalf("the other instance's next request with the revoked key: %d, want 401", status)
	}
	a.JSON("account", "disable", "--account", acct)
	if status, _, _, _ := postTo(client, b.HTTP, other, body); status != http.StatusForbidden {
		t.Fatalf("the other instance's next request of a disabled account: %d, want 403", status)
	}
}

// TestDatabaseDownUnderLoad: PostgreSQL stopped while requests arrive: they get 503
// ledger_unavailable (never a hang, never a charge), readiness says so; started again, the
// same instance serves without a restart, and every 200 was charged exactly once.
func TestDatabaseDownUnderLoad(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pg := pgtest.Shared(t)
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "tok "})
	srv := caddyproc.Start(t, pgSite(url, fs.URL, ""), url)
	acct := caddyproc.Str(t, srv.JSON("account", "create", "--email", "down@example.com"), "id")
	key := caddyproc.Str(t, srv.JSON("key", "create", "--account", acct), "key")
	srv.JSON("credits", "grant", "--account", acct, "--credits", "1000", "--reference", "down")

	load := startLedgerLoad(srv.HTTP, key, 20*time.Millisecond)
	waitCount(t, "requests served before the stop", func() bool { return load.ok.Load() > 50 })
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	waitCount(t, "503s while the database is down", func() bool { return load.unavailable.Load() > 20 })
	resp, err := http.Get("http://" + srv.HTTP + "/api/v1/ready")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("readiness with the database down: %d", resp.StatusCode)
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	served := load.ok.Load()
	waitCount(t, "requests served again after the start", func() bool { return load.ok.Load() > served+50 })
	load.end(t)
	// A text that went out while the database went away is charged once it is back (the
	// settle is retried), never dropped: every 200 is charged, nothing else.
	checkEveryOKCharged(t, srv, acct, load.ok.Load())
}

// ledgerLoad is 8 clients sending generate requests for "tok tok tok " to an instance until
// end, counting the complete 200s, the 503 ledger_unavailable answers that charged nothing, and
// any other answer.
type ledgerLoad struct {
	ok, unavailable, other atomic.Int64
	firstOther             atomic.Value
	stop                   chan struct{}
	wg                     sync.WaitGroup
}

// startLedgerLoad starts the clients against addr with key; pause is a client's wait after a
// 503.
func startLedgerLoad(addr, key string, pause time.Duration) *ledgerLoad {
	l := &ledgerLoad{stop: make(chan struct{})}
	client := &http.Client{Timeout: time.Minute}
	body := genBody("summarizer", "x", "en", "")
	for range 8 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				status, text, h, err := postTo(client, addr, key, body)
				switch {
				case err == nil && status == 200 && text == "tok tok tok ":
					l.ok.Add(1)
				case err == nil && status == 503 && strings.Contains(text, "ledger_unavailable") && h.Get("X-Credits-Used") == "0":
					l.unavailable.Add(1)
					time.Sleep(pause)
				default:
					l.other.Add(1)
					l.firstOther.CompareAndSwap(nil, fmt.Sprintf("%d %q %v", status, text, err))
				}
			}
		}()
	}
	return l
}

// end stops the clients and fails the test if any answer was neither 200 nor 503
// ledger_unavailable.
func (l *ledgerLoad) end(t *testing.T) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	if l.other.Load() != 0 {
		t.Fatalf("%d answers neither 200 nor 503 ledger_unavailable (first: %v)", l.other.Load(), l.firstOther.Load())
	}
}

// checkEveryOKCharged waits until the account's holds are resolved and checks that its 1,000
// credits were charged once for each of its ok answers 200, and that the ledger verifies.
func checkEveryOKCharged(t *testing.T, srv *caddyproc.Server, acct string, ok int64) {
	t.Helper()
	var v, av int64
	waitCount(t, "every settle to be taken and every unconfirmed hold voided", func() bool {
		bal := srv.JSON("balance", "--account", acct)
		v, av = caddyproc.Num(t, bal, "balance"), caddyproc.Num(t, bal, "available")
		return v == av
	})
	if v != 1000-ok {
		t.Fatalf("balance %d after %d answers 200; want %d", v, ok, 1000-ok)
	}
	if v := srv.JSON("ledger", "verify"); !caddyproc.Bool(t, v, "ok") {
		t.Fatalf("verify: %v", v)
	}
}

// waitCount polls cond; the bound is a safety net, not a timing assertion.
func waitCount(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
