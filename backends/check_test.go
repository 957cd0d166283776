package backends_test

import (
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/backends/ollamatest"
)

// Pulling cannot be tried against the real Ollama here (no internet); the fault server's
// /api/pull answers with progress lines like Ollama's.
func TestCheckModelsPullsMissing(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 1})
	core, logs := observer.New(zap.InfoLevel)
	o := newChat(t, backends.ChatConfig{Hosts: []string{fs.URL}, Logger: zap.New(core)})

	err := o.CheckModels(testCtx(t), []string{"tiny", "llama3", "llama3:latest"}, false)
	if err == nil || !strings.Contains(err.Error(), "ollama pull llama3") || strings.Contains(err.Error(), "tiny") {
		t.Fatalf("error %v", err)
	}
	if n := logs.FilterMessageSnippet("model missing").Len(); n != 1 {
		t.Errorf("%d 'model missing' log entries, want 1 (llama3 and llama3:latest are one model)", n)
	}

	if err := o.CheckModels(testCtx(t), []string{"tiny", "llama3"}, true); err != nil {
		t.Fatal(err)
	}
	progress := logs.FilterMessage("pulling model").All()
	if len(progress) < 2 {
		t.Fatalf("pull progress not logged: %v", logs.All())
	}
	if logs.FilterMessage("pulled model").Len() != 1 {
		t.Errorf("pull success not logged")
	}
	if err := o.CheckModels(testCtx(t), []string{"llama3"}, false); err != nil {
		t.Errorf("after pulling: %v", err)
	}
}

func TestCheckModelsHostDown(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{})
	dead := deadPort(t)
	core, logs := observer.New(zap.InfoLevel)
	o := newChat(t, backends.ChatConfig{Hosts: []string{dead, fs.URL}, Logger: zap.New(core)})
	err := o.CheckModels(testCtx(t), []string{"tiny"}, false)
	if err == nil || !strings.Contains(err.Error(), "http://"+dead+" does not answer") {
		t.Fatalf("error %v", err)
	}
	entries := logs.FilterMessageSnippet("does not answer").All()
	if len(entries) != 1 || entries[0].ContextMap()["host"] != "http://"+dead {
		t.Errorf("log %v", logs.All())
	}
	if hs := o.Hosts(); hs[0].Healthy || !hs[1].Healthy {
		t.Errorf("hosts %+v", hs)
	}
}

func TestParseOllamaHost(t *testing.T) {
	cases := map[string]string{
		"http://10.0.0.5:11434":     "http://10.0.0.5:11434",
		"10.0.0.5:1234":             "http://10.0.0.5:1234",
		"gpu-box":                   "http://gpu-box:11434",
		":5000":                     "http://127.0.0.1:5000",
		"0.0.0.0":                   "http://0.0.0.0:11434",
		"https://ollama.example":    "https://ollama.example:443",
		"http://example/":           "http://example:80",
		"http://example:81/ollama/": "http://example:81/ollama",
		"[::1]:11434":               "http://[::1]:11434",
		" http://h:1 ":              "http://h:1",
	}
	for in, want := range cases {
		u, err := backends.ParseOllamaHost(in)
		if err != nil || u.String() != want {
			t.Errorf("ParseOllamaHost(%q) = %v, %v; want %s", in, u, err, want)
		}
	}
	for _, bad := range []string{"", "ftp://h:1", "h:0", "h:99999", "h:x"} {
		if u, err := backends.ParseOllamaHost(bad); err == nil {
			t.Errorf("ParseOllamaHost(%q) = %v, want an error", bad, u)
		}
	}
}

func TestNewChatDefaults(t *testing.T) {
	t.Setenv("OLLAMA_HOST", "gpu-box:1234")
	o := newChat(t, backends.ChatConfig{})
	if hs := o.Hosts(); len(hs) != 1 || hs[0].URL != "http://gpu-box:1234" || !hs[0].Healthy {
		t.Errorf("hosts %+v", hs)
	}
	t.Setenv("OLLAMA_HOST", "")
	o = newChat(t, backends.ChatConfig{})
	if hs := o.Hosts(); hs[0].URL != backends.DefaultOllamaHost {
		t.Errorf("hosts %+v", hs)
	}
	for _, cfg := range []backends.ChatConfig{
		{Hosts: []string{"h:1", "http://h:1"}},
		{Hosts: []string{"h:x"}},
		{IdleTimeout: -1},
		{MaxInFlight: -1},
	} {
		if _, err := backends.NewChat(cfg); err == nil {
			t.Errorf("NewChat(%+v) accepted it", cfg)
		}
	}
}

// TestNormalizeModel: every spelling Ollama resolves to one model has one key, so the start-up
// check neither reports nor pulls a model the host has under its full name.
func TestNormalizeModel(t *testing.T) {
	want := backends.NormalizeModel("llama3")
	for _, s := range []string{"llama3:latest", " Llama3 ", "library/llama3", "registry.ollama.ai/library/llama3:latest"} {
		if got := backends.NormalizeModel(s); got != want {
			t.Errorf("NormalizeModel(%q) = %q, want %q (as for llama3)", s, got, want)
		}
	}
	for _, other := range []string{"llama3:8b", "someone/llama3", "qwen2.5-coder"} {
		if backends.NormalizeModel(other) == want {
			t.Errorf("NormalizeModel(%q) = %q: a different model got llama3's key", other, want)
		}
	}
}
