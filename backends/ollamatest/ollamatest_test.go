package ollamatest_test

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/ollama/ollama/api"
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

// The dev-mode command prints one line with the server's address, serves until SIGINT, and
// then stops Ollama.
func TestTinyOllamaCommand(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tinyollama")
	build := exec.Command("go", "build", "-o", bin, "./cmd/tinyollama")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building tinyollama: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-quiet", "-model", "devmodel", "-num-predict", "5")
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading its line: %v; stderr:\n%s", err, stderr.String())
	}
	var host, model string
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "OLLAMA_HOST":
			host = v
		case "MODEL":
			model = v
		}
	}
	if !strings.HasPrefix(host, "http://127.0.0.1:") || model != "devmodel" {
		t.Fatalf("line %q", line)
	}
	u, _ := url.Parse(host)
	c := api.NewClient(u, http.DefaultClient)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var last api.ChatResponse
	err = c.Chat(ctx, &api.ChatRequest{Model: model, Messages: []api.Message{{Role: "user", Content: "hi"}}},
		func(r api.ChatResponse) error { last = r; return nil })
	if err != nil || !last.Done || last.EvalCount != 5 {
		t.Fatalf("chat: %+v %v", last, err)
	}

	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v; stderr:\n%s", err, stderr.String())
	}
	if err := c.Heartbeat(ctx); err == nil {
		t.Error("ollama still answers after tinyollama exited")
	}
}
