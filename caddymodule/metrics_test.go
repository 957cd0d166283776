package caddymodule

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
)

// scrape reads Caddy's metrics endpoint (the test site's "handle /metrics { metrics }") into
// series -> value, the series written as Prometheus prints it: name{label="value",...}.
func scrape(t *testing.T, e *env) map[string]float64 {
	t.Helper()
	resp := e.get("/metrics", "")
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("metrics endpoint: %d", resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, "caddy_textgen_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// TestMetricsCountKnownTraffic sends a known mix of requests and checks what the metrics
// endpoint counts for it. The collectors live for the process (other tests count too), so the
// test compares the counts before and after.
func TestMetricsCountKnownTraffic(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "tok "})
	e := newEnv(t, envOptions{ollama: fs.URL,
		site:   "handle /metrics {\n\t\tmetrics\n\t}",
		limits: "rate_limit key 3/1m\n\t\trate_limit account off",
		// A model the server does not have: 502 backend_error, kind model_missing.
		extra: "tool email-writer {\n\t\t\tmodel missing\n\t\t}"})
	before := scrape(t, e)
	acct, key := e.account(10)
	acct2, key2 := e.account(10)

	e.generateOK(key)
	e.generateOK(key)
	if resp, _ := e.post(context.Background(), key, genBody("poem-writer", "x", "en", "")); resp.StatusCode != 400 {
		t.Fatalf("unknown tool: %d", resp.StatusCode)
	}
	e.expect429(key, "summarizer", "rate_limited") // the 400 counted against the key too
	if resp, _ := e.post(context.Background(), "tg_live_nope", genBody("summarizer", "x", "en", "")); resp.StatusCode != 401 {
		t.Fatalf("bad key: %d", resp.StatusCode)
	}
	resp, err := e.post(context.Background(), key2, genBody("email-writer", "x", "en", ""))
	if err != nil || resp.StatusCode != 502 {
		t.Fatalf("missing model: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	if e.balance(acct.ID).Balance != 8 || e.balance(acct2.ID).Balance != 10 {
		t.Fatalf("balances %+v %+v", e.balance(acct.ID), e.balance(acct2.ID))
	}

	after := scrape(t, e)
	for series, want := range map[string]float64{
		`caddy_textgen_requests_total{code="200",tool="summarizer"}`:           2,
		`caddy_textgen_requests_total{code="400",tool="none"}`:                 1,
		`caddy_textgen_requests_total{code="429",tool="none"}`:                 1,
		`caddy_textgen_requests_total{code="401",tool="none"}`:                 1,
		`caddy_textgen_requests_total{code="502",tool="email-writer"}`:         1,
		`caddy_textgen_credits_total{mode="live",outcome="settled"}`:           2,
		`caddy_textgen_credits_total{mode="live",outcome="voided"}`:            1,
		`caddy_textgen_holds_open`:                                             0,
		`caddy_textgen_output_tokens_total{tool="summarizer"}`:                 6,
		`caddy_textgen_time_to_first_piece_seconds_count`:                      2,
		`caddy_textgen_generation_duration_seconds_count`:                      2,
		`caddy_textgen_backend_errors_total{kind="model_missing"}`:             1,
		`caddy_textgen_rejections_total{reason="rate_limit_key"}`:              1,
		`caddy_textgen_ledger_op_duration_seconds_count{op="reserve"}`:         3,
		`caddy_textgen_ledger_op_duration_seconds_count{op="settle"}`:          2,
		`caddy_textgen_ledger_op_duration_seconds_count{op="void"}`:            1,
		`caddy_textgen_time_to_first_piece_seconds_bucket{le="+Inf"}`:          2,
		`caddy_textgen_generation_duration_seconds_bucket{le="+Inf"}`:          2,
		`caddy_textgen_ledger_op_duration_seconds_bucket{op="void",le="+Inf"}`: 1,
	} {
		got, ok := after[series]
		if !ok {
			t.Errorf("%s: not exported", series)
			continue
		}
		if d := got - before[series]; d != want {
			t.Errorf("%s: +%v, want +%v", series, d, want)
		}
	}
	// No label carries a key or an account.
	for series := range after {
		for _, secret := range []string{key, key2, acct.ID, acct2.ID, "acct_", "key_", "tg_live_"} {
			if strings.Contains(series, secret) {
				t.Errorf("series %s names a key or account", series)
			}
		}
	}
}

// TestLogsHoldNoKeyOrInput runs requests of every kind (success from the real Ollama, SSE,
// client error, rate limited, invalid key) with the plugin's logs at debug level in a file and
// a site access log in another, and scans both for the full API key and the input text. The
// access log is configured as the README advises (Caddy logs request headers, X-Api-Key among
// them, unless filtered). With log_prompts on, the same scan must find the input: the scan
// itself works.
func TestLogsHoldNoKeyOrInput(t *testing.T) {
	o := realOllama(t)
	const input = "Quokka-Zeppelin-4471 wants the heating fixed"
	run := func(t *testing.T, logPrompts bool) (pluginLog, accessLog, key string) {
		dir := t.TempDir()
		pluginLog, accessLog = filepath.Join(dir, "caddy.log"), filepath.Join(dir, "access.log")
		extra := "max_input_chars 200"
		if logPrompts {
			extra += "\n\t\tlog_prompts"
		}
		e := newEnv(t, envOptions{ollama: o.URL,
			limits: "rate_limit key 4/1m",
			global: "log {\n\t\toutput file " + pluginLog + "\n\t\tlevel DEBUG\n\t}",
			site:   "log {\n\t\toutput file " + accessLog + "\n\t\tformat filter {\n\t\t\twrap json\n\t\t\trequest>headers>X-Api-Key delete\n\t\t}\n\t}",
			extra:  extra})
		_, key = e.account(10)
		send := func(k, body string, hdr ...string) int {
			resp, err := e.post(context.Background(), k, body, hdr...)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		codes := []int{
			send(key, genBody("email-writer", input, "en", "friendly")),
			send(key, genBody("summarizer", input, "de", ""), "Accept", "text/event-stream"),
			send(key, genBody("summarizer", strings.Repeat(input, 10), "en", "")),
			send(key, genBody("no-such-tool", input, "en", "")),
			send(key, genBody("summarizer", input, "en", "")),
			send(key[:len(key)-2]+"zz", genBody("summarizer", input, "en", "")),
		}
		if want := []int{200, 200, 413, 400, 429, 401}; !equalInts(codes, want) {
			t.Fatalf("status codes %v, want %v", codes, want)
		}
		// The log lines are written when the requests end; the files are synced on the
		// next config load, so read them after loading another.
		newEnv(t, envOptions{ollama: o.URL})
		return pluginLog, accessLog, key
	}

	t.Run("default", func(t *testing.T) {
		pluginLog, accessLog, key := run(t, false)
		plugin, access := readFile(t, pluginLog), readFile(t, accessLog)
		bogus := key[:len(key)-2] + "zz"
		if n := strings.Count(plugin, `"msg":"generate"`); n != 6 {
			t.Errorf("%d generate log lines, want one per request (6)", n)
		}
		if !strings.Contains(plugin, key[:8]+"..."+key[len(key)-4:]) {
			t.Errorf("the log lines name no key by prefix and last 4")
		}
		if n := strings.Count(access, `"msg":"handled request"`); n < 6 {
			t.Errorf("%d access log lines", n)
		}
		if !strings.Contains(access, `"Content-Type":["application/json"]`) {
			t.Errorf("the access log lists no request headers: the scan proves nothing about them")
		}
		for name, text := range map[string]string{"plugin log": plugin, "access log": access} {
			if strings.Contains(text, key) || strings.Contains(text, key[8:]) || strings.Contains(text, bogus[8:]) {
				t.Errorf("the %s holds the API key", name)
			}
			if strings.Contains(text, "Quokka-Zeppelin-4471") {
				t.Errorf("the %s holds the input text", name)
			}
		}
		for _, field := range []string{`"request_id":"req_`, `"account_id":"acct_`, `"key_id":"key_`, `"tool":"email-writer"`,
			`"language":"en"`, `"status":200`, `"credits":1`, `"time_to_first":`, `"duration":`, `"output_tokens":`, `"error":"rate_limit_key"`} {
			if !strings.Contains(plugin, field) {
				t.Errorf("the generate lines lack %s", field)
			}
		}
	})
	t.Run("log_prompts", func(t *testing.T) {
		pluginLog, _, key := run(t, true)
		plugin := readFile(t, pluginLog)
		if !strings.Contains(plugin, "Quokka-Zeppelin-4471") {
			t.Errorf("with log_prompts the input is logged, so the scan above can see it; it found nothing")
		}
		if strings.Contains(plugin, key) {
			t.Errorf("even with log_prompts the key is not logged")
		}
	})
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	var data []byte
	waitFor(t, path+" to have content", func() bool {
		data, _ = os.ReadFile(path)
		return len(data) > 0
	})
	return string(data)
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestReady: GET /api/v1/ready is 200 with the ledger open and a healthy model host, 503 with
// the reason when no host is healthy; no key needed, nothing charged.
func TestReady(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3})
	e := newEnv(t, envOptions{ollama: fs.URL})
	resp := e.get("/api/v1/ready", "")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != `{"ready":true,"ledger":"ok","hosts_healthy":1,"hosts":1,"queued":0}`+"\n" ||
		resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("ready: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest(http.MethodHead, baseURL+"/api/v1/ready", nil)
	if resp, err := e.client.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("HEAD: %v %v", resp, err)
	}
	req, _ = http.NewRequest(http.MethodPost, baseURL+"/api/v1/ready", nil)
	if resp, err := e.client.Do(req); err != nil || resp.StatusCode != 405 {
		t.Errorf("POST: %v %v", resp, err)
	}

	// A model server that is down: once a request found it unreachable, not ready.
	dead := newEnv(t, envOptions{ollama: deadURL(t), extra: "connect_timeout 2s"})
	_, key := dead.account(2)
	if resp, err := dead.post(context.Background(), key, genBody("summarizer", "x", "en", "")); err != nil || resp.StatusCode != 503 {
		t.Fatalf("generate against a dead host: %v %v", resp, err)
	}
	var doc struct {
		Ready        bool   `json:"ready"`
		Reason       string `json:"reason"`
		HostsHealthy int    `json:"hosts_healthy"`
	}
	waitFor(t, "the host to be marked down", func() bool {
		resp := dead.get("/api/v1/ready", "")
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 503 && json.Unmarshal(body, &doc) == nil
	})
	if doc.Ready || doc.Reason != "no model host is healthy" || doc.HostsHealthy != 0 {
		t.Errorf("not ready answer %+v", doc)
	}
}
