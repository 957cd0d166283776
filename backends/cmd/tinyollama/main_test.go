package main

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/caddy-textgen/textgen/internal/tier"
)

// The dev-mode command, built and run as a user runs it.

// The dev-mode command prints one line with the server's address, serves until SIGINT, and
// then stops Ollama.
func TestTinyOllamaCommand(t *testing.T) {
	tier.Full(t, "the real Ollama")
	bin := filepath.Join(t.TempDir(), "tinyollama")
	build := exec.Command("go", "build", "-o", bin, ".")
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
