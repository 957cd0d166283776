package textgen_test

// The newcomer's path of README and docs/ACCOUNT.md, "Try a purchase locally", run as written:
// `./xcaddy.sh dev --stripe` builds Caddy with the plugin, installs and starts the test Ollama
// and stripe-mock, and runs the example Caddyfile; an account signed up on My Account has its
// sign-up credits, presses "Buy", and `./xcaddy.sh pay` pays that Checkout Session: the credits
// arrive once. A second start of dev mode keeps the demo account. Real binaries throughout, on
// free ports and in a data folder of the test's own (TEXTGEN_PORT, CADDY_ADMIN, TEXTGEN_DEV_DIR).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/internal/freeport"
	"github.com/caddy-textgen/textgen/internal/tier"
)

// devMode is a running ./xcaddy.sh dev.
type devMode struct {
	t    *testing.T
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	done chan struct{}
}

func devEnv(port, admin int, dir, bin string) []string {
	// Without the developer's Stripe settings (an empty one is not the same as none to the
	// Caddyfile's {$NAME:default}).
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TEXTGEN_STRIPE_") {
			env = append(env, kv)
		}
	}
	return append(env,
		fmt.Sprintf("TEXTGEN_PORT=%d", port), fmt.Sprintf("CADDY_ADMIN=localhost:%d", admin),
		"TEXTGEN_DEV_DIR="+dir, "CADDY_OUT="+bin,
		// Caddy's own data and config folders, away from the developer's.
		"XDG_DATA_HOME="+filepath.Join(dir, "xdg-data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "xdg-config"))
}

// startDev runs ./xcaddy.sh dev with args and waits until it prints that it is running.
func startDev(t *testing.T, env []string, args ...string) *devMode {
	t.Helper()
	d := &devMode{t: t, done: make(chan struct{})}
	d.cmd = exec.Command("./xcaddy.sh", append([]string{"dev"}, args...)...)
	d.cmd.Env = env
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	d.cmd.Stdout, d.cmd.Stderr = pw, pw
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		s := bufio.NewScanner(pr)
		once := sync.Once{}
		for s.Scan() {
			d.mu.Lock()
			d.out.WriteString(s.Text() + "\n")
			d.mu.Unlock()
			if strings.HasPrefix(s.Text(), "Press Ctrl-C to stop.") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	go func() { d.cmd.Wait(); pw.Close(); close(d.done) }()
	t.Cleanup(d.stop)
	select {
	case <-ready:
	case <-d.done:
		t.Fatalf("./xcaddy.sh dev %v ended before it was running:\n%s", args, d.output())
	case <-time.After(20 * time.Minute):
		t.Fatalf("./xcaddy.sh dev %v is not running after 20 minutes:\n%s", args, d.output())
	}
	return d
}

func (d *devMode) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

// stop ends dev mode as Ctrl-C does, and its whole process group if that does not.
func (d *devMode) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	syscall.Kill(d.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
	}
}

var (
	csrfRe     = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)
	demoAcctRe = regexp.MustCompile(`Demo account (acct_[0-9A-Za-z]+) has`)
)

type client struct {
	t    *testing.T
	base string
	c    *http.Client
}

func (c *client) do(method, path string, form url.Values) (int, string, http.Header) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, c.base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := c.c.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

// post sends a form of the page at path, with that page's CSRF token.
func (c *client) post(path string, fields ...string) (int, string, http.Header) {
	c.t.Helper()
	_, page, _ := c.do(http.MethodGet, path, nil)
	m := csrfRe.FindStringSubmatch(page)
	if m == nil {
		c.t.Fatalf("no form on %s:\n%s", path, page)
	}
	form := url.Values{"csrf_token": {m[1]}}
	for i := 0; i+1 < len(fields); i += 2 {
		form.Set(fields[i], fields[i+1])
	}
	return c.do(http.MethodPost, path, form)
}

// run runs a command with env in the repository and returns its output, failing on an error.
func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func TestDevModePurchase(t *testing.T) {
	tier.Full(t, "the Go toolchain, the pinned Ollama and stripe-mock (./xcaddy.sh dev --stripe builds them)")
	ports := freeport.MustPick(2)
	dir := t.TempDir()
	bin := filepath.Join(dir, "caddy")
	env := devEnv(ports[0], ports[1], filepath.Join(dir, "dev"), bin)

	dev := startDev(t, env, "--stripe")
	first := demoAcctRe.FindStringSubmatch(dev.output())
	if first == nil || !strings.Contains(dev.output(), "./xcaddy.sh pay") {
		t.Fatalf("dev mode's message names no demo account or no way to pay:\n%s", dev.output())
	}
	// It said what it was doing before and while it built.
	for _, want := range []string{"building " + bin + ": Caddy with the caddy-textgen plugin", "built " + bin,
		"starting the test Ollama", "starting stripe-mock", "starting Caddy"} {
		if !strings.Contains(dev.output(), want) {
			t.Errorf("dev mode did not say %q:\n%s", want, dev.output())
		}
	}

	jar, _ := cookiejar.New(nil)
	c := &client{t: t, base: fmt.Sprintf("http://localhost:%d", ports[0]), c: &http.Client{Jar: jar, Timeout: time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	email := fmt.Sprintf("newcomer-%d@example.com", time.Now().UnixNano())
	if st, body, _ := c.post("/account/signup", "email", email, "password", "correct horse battery"); st != http.StatusSeeOther {
		t.Fatalf("sign-up: %d\n%s", st, body)
	}
	acct := accountOf(t, run(t, env, bin, "textgen", "account", "list", "--json"), email)
	available := func() int64 {
		t.Helper()
		b := run(t, env, bin, "textgen", "balance", "--account", acct, "--json")
		var v struct{ Available *int64 }
		if json.Unmarshal([]byte(b), &v) != nil || v.Available == nil {
			t.Fatalf("balance: %s", b)
		}
		return *v.Available
	}
	if got := available(); got != 50 {
		t.Fatalf("a new account of dev mode has %d live credits, want the Caddyfile's signup_credits 50", got)
	}

	// "Buy": My Account creates the Checkout Session at stripe-mock and sends the browser there.
	st, body, hdr := c.post("/account/buy", "package", "10")
	if st != http.StatusSeeOther || hdr.Get("Location") == "" {
		t.Fatalf("buy: %d %v\n%s", st, hdr, body)
	}
	pay := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "./xcaddy.sh", "pay")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("./xcaddy.sh pay: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := pay(); !strings.Contains(out, "The webhook answered 200: credited.") || !strings.Contains(out, acct) {
		t.Fatalf("./xcaddy.sh pay:\n%s", out)
	}
	if got := available(); got != 60 {
		t.Fatalf("after the purchase: %d live credits, want 60", got)
	}
	if out := pay(); !strings.Contains(out, "duplicate: credited before") {
		t.Fatalf("./xcaddy.sh pay again:\n%s", out)
	}
	if got := available(); got != 60 {
		t.Fatalf("after paying the same session again: %d live credits, want 60", got)
	}

	// A second start keeps the demo account (and its key) and the account signed up.
	dev.stop()
	again := startDev(t, env)
	second := demoAcctRe.FindStringSubmatch(again.output())
	if second == nil || second[1] != first[1] {
		t.Fatalf("the second start's demo account %v, want %s:\n%s", second, first[1], again.output())
	}
	if got := available(); got != 60 {
		t.Fatalf("after a restart: %d live credits, want 60", got)
	}
}

// accountOf finds the id of the account with email in the JSON of `caddy textgen account list`.
func accountOf(t *testing.T, list, email string) string {
	t.Helper()
	var walk func(v any) string
	walk = func(v any) string {
		switch v := v.(type) {
		case map[string]any:
			if v["email"] == email {
				if id, ok := v["id"].(string); ok {
					return id
				}
			}
			for _, x := range v {
				if id := walk(x); id != "" {
					return id
				}
			}
		case []any:
			for _, x := range v {
				if id := walk(x); id != "" {
					return id
				}
			}
		}
		return ""
	}
	var v any
	if err := json.Unmarshal([]byte(list), &v); err != nil {
		t.Fatalf("account list: %v\n%s", err, list)
	}
	id := walk(v)
	if id == "" {
		t.Fatalf("no account %s in:\n%s", email, list)
	}
	return id
}
