package caddymodule

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
)

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
