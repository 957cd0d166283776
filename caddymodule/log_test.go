package caddymodule

import (
	"context"
	"io"
	"os"
	"path/filepath"
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
