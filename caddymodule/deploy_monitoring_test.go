package caddymodule

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// monitoringFiles are the dashboard and the alerting rules an operator imports
// (deploy/monitoring, docs/OPERATING.md "Dashboard and alerts").
var monitoringFiles = []string{
	"../deploy/monitoring/grafana-dashboard.json",
	"../deploy/monitoring/alerts.yml",
}

// seriesName matches the plugin's series in a PromQL expression.
var seriesName = regexp.MustCompile(`caddy_textgen_[a-z0-9_]+`)

// TestMonitoringSeriesExist runs a real server, sends it the traffic that makes every kind of
// series appear (a generation, a refused one, a failed one), scrapes its metrics endpoint, and
// checks that every series the dashboard and the alerting rules name is exported: a renamed or
// removed metric breaks this test, not the operator's alerts in silence. It also checks the
// gauges the rules added have sane values (one healthy model host, a disk with free space).
func TestMonitoringSeriesExist(t *testing.T) {
	e := newEnv(t, envOptions{ollama: modelServer(t),
		site:   "handle /metrics {\n\t\tmetrics\n\t}",
		limits: "rate_limit key 2/1h\n\t\trate_limit account off",
		// A model the server does not have: 502 backend_error (backend_errors_total).
		extra: "tool email-writer {\n\t\t\tmodel missing-model\n\t\t}"})
	_, key := e.account(10)
	ok, err := e.post(context.Background(), key, genBody("summarizer", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, ok.Body)
	ok.Body.Close()
	if ok.StatusCode != 200 {
		t.Fatalf("generate: %d", ok.StatusCode)
	}
	resp, err := e.post(context.Background(), key, genBody("email-writer", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 {
		t.Fatalf("missing model: %d, want 502", resp.StatusCode)
	}
	e.expect429(key, "summarizer", "rate_limited") // rejections_total

	got := map[string]bool{} // exported metric names, as PromQL names them
	values := scrape(t, e)
	for series := range values {
		name, _, _ := strings.Cut(series, "{")
		got[name] = true
	}
	for _, f := range monitoringFiles {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".json") {
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
		used := seriesName.FindAllString(string(raw), -1)
		if len(used) == 0 {
			t.Fatalf("%s names no caddy_textgen_ series", f)
		}
		var missing []string
		seen := map[string]bool{}
		for _, name := range used {
			if !got[name] && !seen[name] {
				missing = append(missing, name)
			}
			seen[name] = true
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			t.Errorf("%s uses series the server does not export: %v", filepath.Base(f), missing)
		}
	}
	if v := values[`caddy_textgen_model_hosts{state="healthy"}`]; v < 1 {
		t.Errorf("model_hosts{healthy} = %v, want at least 1", v)
	}
	if v, ok := values[`caddy_textgen_ledger_disk_free_ratio`]; !ok || v <= 0 || v > 1 {
		t.Errorf("ledger_disk_free_ratio = %v (exported %v), want in (0, 1]", v, ok)
	}
	if v := values[`caddy_textgen_ledger_disk_free_bytes`]; v <= 0 {
		t.Errorf("ledger_disk_free_bytes = %v, want > 0", v)
	}
	if _, ok := values[`caddy_textgen_queue_length`]; !ok {
		t.Error("queue_length is not exported")
	}
}
