package caddymodule

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/browsertest"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/chromedp/chromedp"
)

// cutProxy is a TCP relay in front of the in-process Caddy that cuts its first connection a
// few bytes into the response body: a bad mobile network. Later connections
// pass unchanged.
type cutProxy struct {
	ln    net.Listener
	conns atomic.Int64
	cut   atomic.Bool
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, target string, afterBody int) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			first := p.conns.Add(1) == 1
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { // the client's end ends the upstream connection too
					io.Copy(up, c)
					up.Close()
				}()
				if !first {
					io.Copy(c, up)
					return
				}
				// Pass the headers and afterBody bytes of the body, then cut both sides.
				var seen []byte
				buf := make([]byte, 1)
				for {
					if _, err := up.Read(buf); err != nil {
						return
					}
					seen = append(seen, buf[0])
					if _, err := c.Write(buf); err != nil {
						return
					}
					if i := bytes.Index(seen, []byte("\r\n\r\n")); i >= 0 && len(seen) >= i+4+afterBody {
						p.cut.Store(true)
						return
					}
				}
			}()
		}
	}()
	return p
}

// clientCmd is one of the clients of docs/clients: the command line that runs it.
type clientCmd struct {
	name string
	argv []string
}

var (
	goClientOnce sync.Once
	goClientBin  string
	goClientErr  error
)

// clientCmds are the Python, JavaScript and Go clients; a missing python3 or node fails the
// test (CI installs both), and the Go one is built once per test run.
func clientCmds(t *testing.T) []clientCmd {
	t.Helper()
	dir := filepath.Join("..", "docs", "clients")
	var out []clientCmd
	for _, c := range []struct{ name, prog, file string }{{"python", "python3", "textgen.py"}, {"javascript", "node", "textgen.mjs"}} {
		path, err := exec.LookPath(c.prog)
		if err != nil {
			t.Fatalf("%s is needed to run docs/clients/%s: %v", c.prog, c.file, err)
		}
		out = append(out, clientCmd{c.name, []string{path, filepath.Join(dir, c.file)}})
	}
	goClientOnce.Do(func() {
		goClientBin = filepath.Join(testRoot, "textgen-go-client")
		var msg []byte
		msg, goClientErr = exec.Command("go", "build", "-o", goClientBin, "./"+filepath.Join(dir, "go")).CombinedOutput()
		if goClientErr != nil {
			goClientErr = fmt.Errorf("%v: %s", goClientErr, msg)
		}
	})
	if goClientErr != nil {
		t.Fatalf("building docs/clients/go: %v", goClientErr)
	}
	return append(out, clientCmd{"go", []string{goClientBin}})
}

// command is the client's command line for url and key with args (a request body and an
// Idempotency-Key).
func (c clientCmd) command(ctx context.Context, url, key string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.argv[0], append(c.argv[1:], args...)...)
	cmd.Env = append(os.Environ(), "TEXTGEN_URL="+url, "TEXTGEN_KEY="+key, "PYTHONDONTWRITEBYTECODE=1")
	return cmd
}

// run runs the client against url with key for body; it returns its output, its log and its
// exit code.
func (c clientCmd) run(t *testing.T, url, key, body, idem string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := c.command(ctx, url, key, body, idem)
	var out, log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &log
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", c.name, err)
	}
	return out.String(), log.String(), code
}

// runOutputClosed runs the client with its standard output a pipe that is closed after the
// first bytes of text; it returns the client's log and exit code (-1 if a signal ended it).
func (c clientCmd) runOutputClosed(t *testing.T, url, key, body string) (stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := c.command(ctx, url, key, body)
	var log bytes.Buffer
	cmd.Stderr = &log
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := out.Read(make([]byte, 1)); err != nil {
		t.Fatalf("%s printed nothing: %v\n%s", c.name, err, log.String())
	}
	out.Close()
	err = cmd.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s: %v", c.name, err)
	}
	return log.String(), cmd.ProcessState.ExitCode()
}

// TestClients runs the clients of docs/clients (Python, JavaScript, Go) against the real Caddy
// and checks each error class: a whole text charged once; a stream cut by the network resumed
// after its last event; 402 with where to buy (exit 2); 429 waited out by Retry-After; 503 from
// a busy model server retried. The fault server paces the pieces so that the cut falls while
// the model generates, and plays the busy model server.
func TestClients(t *testing.T) {
	const pieces = 30
	fsrv := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: pieces, Piece: "Heron", Numbered: true, Delay: 15 * time.Millisecond})
	e := newEnv(t, envOptions{ollama: fsrv.URL, extra: "retention_key " + testRetentionKey + "\n\t\tbuy_url https://shop.example/buy",
		limits: "rate_limit key 1/3s\n\t\trate_limit account 1000000/1m\n\t\tmax_concurrent_per_account 100"})
	want := numbered("Heron", pieces)
	body := genBody("summarizer", "x", "en", "")
	for _, c := range clientCmds(t) {
		t.Run(c.name, func(t *testing.T) {
			expect := func(what, out, log string, code int) {
				t.Helper()
				if code != 0 || out != want {
					t.Fatalf("%s: exit %d, printed %q\n%s", what, code, out, log)
				}
			}
			// charged: n generations charged once each (a refused request's hold is voided).
			charged := func(acctID string, n int) {
				t.Helper()
				waitFor(t, "the charge", func() bool { return e.count(acctID, ledger.KindSettle) == n })
				if b := e.balance(acctID); b.Balance != 3-int64(n) || b.Available != b.Balance {
					t.Fatalf("balance %+v, want %d: charged once a generation", b, 3-n)
				}
			}

			acct, key := e.account(3)
			out, log, code := c.run(t, baseURL, key, body, "")
			expect("a whole text", out, log, code)
			if !strings.Contains(log, "2 left") {
				t.Errorf("the client did not report the credits left: %q", log)
			}
			charged(acct.ID, 1)

			acct, key = e.account(3)
			proxy := newCutProxy(t, strings.TrimPrefix(baseURL, "http://"), 200)
			out, log, code = c.run(t, "http://"+proxy.ln.Addr().String(), key, body, "cut-"+c.name)
			expect("a cut stream", out, log, code)
			if !proxy.cut.Load() || proxy.conns.Load() < 2 || !strings.Contains(log, "resuming") {
				t.Fatalf("the stream was not cut and resumed (cut %v, %d connections): %q", proxy.cut.Load(), proxy.conns.Load(), log)
			}
			charged(acct.ID, 1)

			_, key = e.account(0)
			out, log, code = c.run(t, baseURL, key, body, "")
			if code != 2 || out != "" || !strings.Contains(log, "https://shop.example/buy") {
				t.Fatalf("402: exit %d, printed %q, log %q; want exit 2 and where to buy", code, out, log)
			}

			acct, key = e.account(3)
			resp, err := e.post(context.Background(), key, body) // the key's one request per 3 s
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			out, log, code = c.run(t, baseURL, key, body, "")
			expect("after a 429", out, log, code)
			if !strings.Contains(log, "rate_limited: waiting") {
				t.Fatalf("the client did not wait out the 429: %q", log)
			}
			charged(acct.ID, 2)

			// The client's own output closes mid-text (a pipe to a program that quit): that is not a
			// cut stream, so the client stops rather than resuming, and the text is charged once.
			acct, key = e.account(3)
			log, code = c.runOutputClosed(t, baseURL, key, body)
			if code == 0 || strings.Contains(log, "resuming") || strings.Contains(log, "retrying") {
				t.Fatalf("output closed: exit %d, log %q; want a failure without resuming", code, log)
			}
			charged(acct.ID, 1)

			// The model server is busy for the first request only.
			acct, key = e.account(3)
			fsrv.Set(ollamatest.FaultConfig{Mode: ollamatest.FaultBusy})
			before := fsrv.Requests()
			go func() {
				for deadline := time.Now().Add(time.Minute); fsrv.Requests() == before && time.Now().Before(deadline); {
					time.Sleep(5 * time.Millisecond)
				}
				fsrv.Set(ollamatest.FaultConfig{Pieces: pieces, Piece: "Heron", Numbered: true, Delay: 15 * time.Millisecond})
			}()
			out, log, code = c.run(t, baseURL, key, body, "")
			expect("after a 503", out, log, code)
			if !strings.Contains(log, "overloaded: retrying") {
				t.Fatalf("the client did not retry the 503: %q", log)
			}
			charged(acct.ID, 1)
		})
	}
}

// TestClientInBrowser runs generate() of docs/clients/textgen.mjs in a real headless Chromium,
// from a page of another origin (the API allows it with cors_origins): a whole text streamed
// through fetch, a stream cut by the network and resumed from the headers CORS exposes, and a 402.
func TestClientInBrowser(t *testing.T) {
	const pieces = 30
	src, err := os.ReadFile(filepath.Join("..", "docs", "clients", "textgen.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/textgen.mjs" {
			w.Header().Set("Content-Type", "text/javascript")
			w.Write(src)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<!doctype html><title>client</title>")
	}))
	defer page.Close()
	fsrv := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: pieces, Piece: "Heron", Numbered: true, Delay: 15 * time.Millisecond})
	e := newEnv(t, envOptions{ollama: fsrv.URL, extra: "retention_key " + testRetentionKey + "\n\t\tcors_origins " + page.URL})
	browser := browsertest.Start(t)
	// Closed before the cut proxy's cleanup, which waits for the browser's kept-alive connections.
	defer chromedp.Cancel(browser)
	ctx, cancel := context.WithTimeout(browser, 2*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(page.URL+"/")); err != nil {
		t.Fatal(err)
	}
	type result struct {
		Out    string
		Status int
		Done   struct {
			CreditsUsed int `json:"credits_used"`
		}
	}
	run := func(api, key string) result {
		t.Helper()
		js := fmt.Sprintf(`import("/textgen.mjs").then(async ({ generate }) => {
			let out = "";
			try {
				const done = await generate({ api: %q, key: %q, body: { tool: "summarizer", input: "x", language: "en" },
					onText: (t) => { out += t; }, log: () => {} });
				return { out, done, status: 200 };
			} catch (err) { return { out, status: err.status ?? 0, error: String(err) }; }
		})`, api, key)
		r, err := chromedp.Run(ctx, chromedp.Evaluate[result](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("running the client in Chromium: %v", err)
		}
		return r
	}
	want := numbered("Heron", pieces)
	acct, key := e.account(3)
	if r := run(baseURL, key); r.Status != 200 || r.Out != want || r.Done.CreditsUsed != 1 {
		t.Fatalf("in the browser: %+v", r)
	}
	acct2, key2 := e.account(3)
	proxy := newCutProxy(t, strings.TrimPrefix(baseURL, "http://"), 200)
	if r := run("http://"+proxy.ln.Addr().String(), key2); r.Status != 200 || r.Out != want || !proxy.cut.Load() {
		t.Fatalf("a cut stream in the browser (cut %v): %+v", proxy.cut.Load(), r)
	}
	_, broke := e.account(0)
	if r := run(baseURL, broke); r.Status != 402 || r.Out != "" {
		t.Fatalf("402 in the browser: %+v", r)
	}
	for _, id := range []string{acct.ID, acct2.ID} {
		waitFor(t, "the charge", func() bool { return e.balance(id).Balance == 2 })
	}
}
