package caddymodule

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLogsHoldNoKeyOrInput runs requests of every kind (success from the real Ollama, SSE,
// client error, rate limited, invalid key) with the plugin's logs at debug level in a file and
// a site access log in another, and scans both for the full API key and the input text. The
// access log is configured as docs/OPERATING.md advises (Caddy logs request headers, X-Api-Key among
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
			limits: "rate_limit key 4/24h", // no token comes back during the test, however slow the model
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

// TestAccessLogBearerKey: Caddy's access log encodes a copy of the request headers taken before
// any handler runs, so no plugin can redact X-Api-Key there; Authorization Caddy redacts itself.
// With a plain access log (no filter), a key sent as Authorization: Bearer, as every example
// sends it, is never in the log in clear: not for generate (plain and SSE), balance or
// generations. A key sent in X-API-Key is, which is why such a site keeps the README's filter
// (and shows that the scan finds a key that is there).
func TestAccessLogBearerKey(t *testing.T) {
	fs := fastBackend(t)
	accessLog := filepath.Join(t.TempDir(), "access.log")
	pluginLog := filepath.Join(t.TempDir(), "caddy.log")
	e := newEnv(t, envOptions{ollama: fs.URL, site: "log {\n\t\toutput file " + accessLog + "\n\t}",
		global: "log {\n\t\toutput file " + pluginLog + "\n\t}",
		extra:  "retention_key " + testRetentionKey})
	_, key := e.account(10)
	_, xKey := e.account(10)
	do := func(method, path, body string, hdr ...string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, baseURL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d", method, path, resp.StatusCode)
		}
		return resp
	}
	bearer := "Bearer " + key
	body := genBody("summarizer", "x", "en", "")
	rid := do(http.MethodPost, "/api/v1/generate", body, "Authorization", bearer).Header.Get("X-Request-Id")
	do(http.MethodPost, "/api/v1/generate", body, "Authorization", bearer, "Accept", "text/event-stream")
	do(http.MethodGet, "/api/v1/balance", "", "Authorization", bearer)
	do(http.MethodGet, "/api/v1/generations/"+rid, "", "Authorization", bearer, "Accept", "text/plain")
	do(http.MethodGet, "/api/v1/balance", "", "X-API-Key", xKey)
	do(http.MethodGet, "/api/v1/balance", "", "X-API-Key", xKey)
	// The log lines are written when the requests end; the file is synced on the next config
	// load, so read it after loading another.
	newEnv(t, envOptions{ollama: fs.URL})
	// Warned once, at start (the warning that names the logs is the one the config's check
	// writes, before any key came), and not again when keys came in X-API-Key.
	if lines := warningLines(t, pluginLog); len(lines) != 1 || !strings.Contains(lines[0], `"logs":["log0"]`) ||
		!strings.Contains(lines[0], "request>headers>X-Api-Key delete") {
		t.Errorf("the warnings of keys in the access log: %q, want one at start naming the log and the filter", lines)
	}
	access := readFile(t, accessLog)
	if n := strings.Count(access, `"msg":"handled request"`); n < 6 {
		t.Fatalf("%d access log lines, want 6", n)
	}
	if !strings.Contains(access, `"Authorization":["REDACTED"]`) {
		t.Errorf("the access log shows no redacted Authorization header: the scan proves nothing about it")
	}
	if strings.Contains(access, key[8:]) {
		t.Errorf("the access log holds the key sent as Authorization: Bearer")
	}
	if !strings.Contains(access, xKey) {
		t.Errorf("the access log does not hold the key sent in X-API-Key: is the access log still unfiltered, and the README's advice still needed?")
	}
}

// accessLogWarningText is in every warning of keys in the access log.
const accessLogWarningText = "an API key sent in X-API-Key is written there in clear"

// warningLines returns the lines of the plugin's log at path that warn of keys in the access log.
func warningLines(t *testing.T, path string) []string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(readFile(t, path), "\n") {
		if strings.Contains(l, accessLogWarningText) {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestAccessLogFilteredNoWarning: a site whose access log has the filter of the production
// example Caddyfile is not warned about, neither at start nor when keys come in X-API-Key, and
// neither is a site without an access log; the same site with its filter on another field is
// warned about at start, naming its log (and not the default log, which the Caddyfile keeps
// for the requests to other hosts).
func TestAccessLogFilteredNoWarning(t *testing.T) {
	fs := fastBackend(t)
	for _, c := range []struct {
		field string // "": no access log
		warn  bool
	}{{"request>headers>X-Api-Key", false}, {"request>headers>User-Agent", true}, {"", false}} {
		dir := t.TempDir()
		accessLog, pluginLog := filepath.Join(dir, "access.log"), filepath.Join(dir, "caddy.log")
		site := ""
		if c.field != "" {
			site = "log {\n\t\toutput file " + accessLog + "\n\t\tformat filter {\n\t\t\twrap json\n\t\t\t" + c.field + " delete\n\t\t}\n\t}"
		}
		e := newEnv(t, envOptions{ollama: fs.URL, site: site,
			global: "log {\n\t\toutput file " + pluginLog + "\n\t}"})
		_, key := e.account(10)
		req, _ := http.NewRequest(http.MethodGet, baseURL+"/api/v1/balance", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("balance: %d", resp.StatusCode)
		}
		newEnv(t, envOptions{ollama: fs.URL}) // syncs the log files
		lines := warningLines(t, pluginLog)
		if c.warn != (len(lines) == 1) || len(lines) > 1 {
			t.Errorf("filter on %q: warnings %q, want %v", c.field, lines, c.warn)
		}
		if c.warn && len(lines) == 1 && !strings.Contains(lines[0], `"logs":["log0"]`) {
			t.Errorf("filter on %q: the warning %q does not name the site's log (alone)", c.field, lines[0])
		}
		if c.field != "" && !c.warn && strings.Contains(readFile(t, accessLog), key) {
			t.Errorf("the filtered access log holds the key")
		}
	}
}

// TestAccessLogWarningPerSite: the warning is about the sites that route to textgen. Two sites
// on one server: the textgen site's access log filtered and another site's plain log is not
// warned about; the textgen site's log plain and the other site's filtered is, naming the
// textgen site's log alone.
func TestAccessLogWarningPerSite(t *testing.T) {
	fs := fastBackend(t)
	const filter = "\n\t\tformat filter {\n\t\t\twrap json\n\t\t\trequest>headers>X-Api-Key delete\n\t\t}"
	for _, c := range []struct {
		textgenFilter, otherFilter string
		warn                       bool
	}{{filter, "", false}, {"", filter, true}} {
		dir := t.TempDir()
		pluginLog := filepath.Join(dir, "caddy.log")
		o := envOptions{ollama: fs.URL,
			site:   "log {\n\t\toutput file " + filepath.Join(dir, "access.log") + c.textgenFilter + "\n\t}",
			global: "log {\n\t\toutput file " + pluginLog + "\n\t}"}
		loadConfig(t, caddyfileFor(o, ledgerDir(t))+fmt.Sprintf(`http://localhost:%d {
	log {
		output file %s%s
	}
	respond "another site" 200
}
`, httpPort, filepath.Join(dir, "other.log"), c.otherFilter))
		newEnv(t, envOptions{ollama: fs.URL}) // syncs the log files
		lines := warningLines(t, pluginLog)
		if c.warn != (len(lines) == 1) || len(lines) > 1 {
			t.Errorf("textgen site's filter %q: warnings %q, want %v", c.textgenFilter, lines, c.warn)
		}
		if c.warn && len(lines) == 1 && !regexp.MustCompile(`"logs":\["log\d+"\]`).MatchString(lines[0]) {
			t.Errorf("the warning %q does not name one log, the textgen site's", lines[0])
		}
	}
}
