package ollamatest_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
)

func TestWriteTinyModelIsDeterministic(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.gguf"), filepath.Join(dir, "b.gguf")
	for _, p := range []string{a, b} {
		if err := ollamatest.WriteTinyModel(p); err != nil {
			t.Fatal(err)
		}
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if len(da) < 100<<10 || !bytes.Equal(da, db) || string(da[:4]) != "GGUF" {
		t.Errorf("sizes %d, %d; equal %v", len(da), len(db), bytes.Equal(da, db))
	}
}

func TestFaultServerSpeaksOllama(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "ab"})
	u, _ := url.Parse(fs.URL)
	c := api.NewClient(u, http.DefaultClient)
	ctx := context.Background()
	if err := c.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Version(ctx); err != nil || v == "" {
		t.Fatalf("version %q %v", v, err)
	}
	var text strings.Builder
	var done bool
	err := c.Chat(ctx, &api.ChatRequest{Model: "tiny", Messages: []api.Message{{Role: "user", Content: "x"}}},
		func(r api.ChatResponse) error { text.WriteString(r.Message.Content); done = r.Done; return nil })
	if err != nil || text.String() != "ababab" || !done {
		t.Fatalf("chat %q done %v err %v", text.String(), done, err)
	}
	if err := c.Pull(ctx, &api.PullRequest{Model: "other"}, func(api.ProgressResponse) error { return nil }); err != nil {
		t.Fatal(err)
	}
	list, err := c.List(ctx)
	if err != nil || len(list.Models) != 2 {
		t.Fatalf("list %+v %v", list, err)
	}
	if _, err := c.Show(ctx, &api.ShowRequest{Model: "missing"}); err == nil {
		t.Error("show of a missing model succeeded")
	}
	if fs.Requests() != 1 || fs.LastRequest().Messages[0].Content != "x" {
		t.Errorf("requests %d last %+v", fs.Requests(), fs.LastRequest())
	}
}
