package backends_test

// Tests against the real, pinned Ollama server (ollamatest builds it if missing; nothing skips).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ollama/ollama/api"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/internal/tier"
)

// shared is one real Ollama server for the tests that do not need special settings.
var shared struct {
	once sync.Once
	srv  *ollamatest.Server
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Stop()
	}
	os.Exit(code)
}

func sharedOllama(t testing.TB) *ollamatest.Server {
	t.Helper()
	tier.Full(t, "the real Ollama")
	shared.once.Do(func() {
		shared.srv, shared.err = ollamatest.Start(context.Background(), ollamatest.Options{})
	})
	if shared.err != nil {
		t.Fatalf("starting the shared real ollama: %v", shared.err)
	}
	srv := shared.srv
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("shared ollama log tail:\n%s", srv.LogTail(3000))
		}
	})
	return srv
}

// eachAPI runs a test of the backend's contract once for each wire, against the same server:
// Ollama's own API and its OpenAI-compatible one (/v1/chat/completions), so the OpenAI wire
// passes the very suite Ollama's wire does.
func eachAPI(t *testing.T, test func(t *testing.T, api string)) {
	for _, api := range []string{apiOllama, apiOpenAI} {
		t.Run(api, func(t *testing.T) { test(t, api) })
	}
}

// The wires the tests run on, by the name eachAPI gives them.
const (
	apiOllama = "ollama"
	apiOpenAI = "openai"
)

// wireOf is the wire named api, without a key or keep_alive.
func wireOf(api string) backends.Wire {
	if api == apiOpenAI {
		return backends.NewOpenAIWire("")
	}
	return backends.NewOllamaWire(nil)
}

func newChat(t testing.TB, cfg backends.ChatConfig) *backends.Chat {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t)
	}
	o, err := backends.NewChat(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

// testCtx bounds a test that could otherwise hang on a bug; it is a safety net, never an
// assertion about speed.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func wantKind(t testing.TB, err error, want backends.Kind) *backends.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got success, want a %s error", want)
	}
	var be *backends.Error
	if !errors.As(err, &be) {
		t.Fatalf("got %T %v, want *backends.Error", err, err)
	}
	if be.Kind != want {
		t.Fatalf("got kind %s (%v), want %s", be.Kind, err, want)
	}
	return be
}

func deadPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// Pieces reach emit while the model is still generating: a generation asked for a million
// tokens is nowhere near its end after ten pieces, so had the pieces been held back until the
// end, none would have arrived.
func TestChatStreamsPiecesWhileGenerating(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		srv := sharedOllama(t)
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{srv.URL}})

		enough := errors.New("enough pieces")
		var arrivals []time.Time
		var text strings.Builder
		_, err := o.Generate(testCtx(t), backends.Request{Model: srv.Model, Prompt: "tell me a story", MaxTokens: 1_000_000},
			func(piece string) error {
				arrivals = append(arrivals, time.Now())
				text.WriteString(piece)
				if len(arrivals) == 10 {
					return enough
				}
				return nil
			})
		be := wantKind(t, err, backends.KindCanceled)
		if !errors.Is(err, enough) {
			t.Errorf("error %v does not wrap emit's error", err)
		}
		if be.Pieces != 10 || len(arrivals) != 10 {
			t.Fatalf("got %d pieces (error says %d), want 10", len(arrivals), be.Pieces)
		}
		// The gaps are only logged: a busy machine may deliver a few pieces in one read.
		var gaps []string
		for i := 1; i < len(arrivals); i++ {
			gaps = append(gaps, arrivals[i].Sub(arrivals[i-1]).Round(time.Microsecond).String())
		}
		t.Logf("10 pieces %q, gaps %v", text.String(), gaps)
	})
}

func TestChatCompleteGenerationStats(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		srv := sharedOllama(t)
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{srv.URL}})
		zero := 0.0
		var pieces []string
		stats, err := o.Generate(testCtx(t), backends.Request{
			Model: srv.Model, System: "You are terse.", Prompt: "hello world",
			MaxTokens: 24, Temperature: &zero, NumCtx: 1024,
		}, func(piece string) error {
			if piece == "" {
				t.Error("empty piece emitted")
			}
			pieces = append(pieces, piece)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("stats %+v text %q", stats, strings.Join(pieces, ""))
		// The tiny model never stops by itself and every token is one printable piece.
		if stats.OutputTokens != 24 || stats.Pieces != 24 || len(pieces) != 24 {
			t.Errorf("output tokens %d, pieces %d (emitted %d), want 24", stats.OutputTokens, stats.Pieces, len(pieces))
		}
		if stats.DoneReason != "length" {
			t.Errorf("done reason %q, want length", stats.DoneReason)
		}
		if stats.PromptTokens <= 0 {
			t.Errorf("prompt tokens %d", stats.PromptTokens)
		}
		if stats.TimeToFirst <= 0 || stats.Total < stats.TimeToFirst {
			t.Errorf("time to first %v, total %v", stats.TimeToFirst, stats.Total)
		}
		if stats.Host != srv.URL {
			t.Errorf("host %q, want %q", stats.Host, srv.URL)
		}
	})
}

// Cancelling the caller's context, or an emit error, closes the connection to Ollama at once,
// which is how Ollama learns to stop generating. A relay in front of the real Ollama counts the
// connections the backend closed: a generation left running would keep its connection busy,
// and one that ended by itself would leave it open for reuse. (Whether a next request is served
// soon does not tell: the tiny random model's generations end and free their slot at random
// times.) The backend stays usable afterwards.
func TestChatCancelStopsGenerationOnServer(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		srv := ollamatest.StartT(t, ollamatest.Options{})
		relay, err := ollamatest.NewRelay(srv.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(relay.Close)
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{relay.URL}})

		for _, how := range []string{"context", "emit"} {
			ctx, cancel := context.WithCancel(testCtx(t))
			before := relay.ClientClosed()
			n := 0
			_, err := o.Generate(ctx, backends.Request{Model: srv.Model, Prompt: "go on", MaxTokens: 1_000_000},
				func(string) error {
					n++
					if n == 3 {
						if how == "emit" {
							return errors.New("client went away")
						}
						cancel()
					}
					return nil
				})
			cancel()
			be := wantKind(t, err, backends.KindCanceled)
			if how == "context" && !errors.Is(err, context.Canceled) {
				t.Errorf("%s: error %v does not wrap context.Canceled", how, err)
			}
			if be.Pieces < 3 {
				t.Errorf("%s: pieces %d, want >= 3", how, be.Pieces)
			}
			waitFor(t, how+": the backend to close its connection to Ollama", func() bool { return relay.ClientClosed() > before })

			stats, err := o.Generate(testCtx(t), backends.Request{Model: srv.Model, Prompt: "next", MaxTokens: 8},
				func(string) error { return nil })
			if err != nil {
				t.Fatalf("%s: the request after the cancelled one failed: %v", how, err)
			}
			if stats.OutputTokens != 8 {
				t.Errorf("%s: next request: %d tokens, want 8", how, stats.OutputTokens)
			}
		}
	})
}

func TestChatModelMissing(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		srv := sharedOllama(t)
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{srv.URL}})
		_, err := o.Generate(testCtx(t), backends.Request{Model: "no-such-model", Prompt: "hi"},
			func(string) error { t.Error("emit called"); return nil })
		be := wantKind(t, err, backends.KindModelMissing)
		if be.Host != srv.URL || be.Pieces != 0 {
			t.Errorf("error %+v", be)
		}
		if !strings.Contains(err.Error(), "no-such-model") {
			t.Errorf("error %q does not name the model", err)
		}
	})
}

// A stopped server gives KindUnavailable and marks the host down; once a server answers on the
// same address again, the health checker marks it up and generation works.
func TestChatStoppedServerThenBack(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		srv := ollamatest.StartT(t, ollamatest.Options{})
		_, portStr, _ := net.SplitHostPort(srv.Host)
		port, _ := strconv.Atoi(portStr)
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{srv.URL}, HealthInterval: 50 * time.Millisecond})
		gen := func() error {
			_, err := o.Generate(testCtx(t), backends.Request{Model: srv.Model, Prompt: "hi", MaxTokens: 4},
				func(string) error { return nil })
			return err
		}
		if err := gen(); err != nil {
			t.Fatal(err)
		}

		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		wantKind(t, gen(), backends.KindUnavailable)
		if h := o.Hosts()[0]; h.Healthy || h.LastError == "" {
			t.Errorf("after a failed connection: %+v, want unhealthy with an error", h)
		}
		// Every host is down: Generate still tries it (nothing to lose) and reports unavailable.
		wantKind(t, gen(), backends.KindUnavailable)

		ollamatest.StartT(t, ollamatest.Options{Port: port})
		waitFor(t, "the health checker to mark the host up", func() bool { return o.Hosts()[0].Healthy })
		if err := gen(); err != nil {
			t.Fatal(err)
		}
	})
}

// With one parallel slot and a queue of one, a burst that arrives while the model loads gets
// Ollama's 503 "server busy" as KindOverloaded. (Ollama v0.6.8 only queues in its scheduler while
// a model is loading; once it is loaded, requests wait in the runner without limit, so the burst
// starts with the model unloaded.)
func TestChatOverloadedBurst(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		srv := ollamatest.StartT(t, ollamatest.Options{NumParallel: 1, MaxQueue: 1, SkipPrewarm: true})
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{srv.URL}})

		const burst = 8
		for attempt := 1; ; attempt++ {
			var (
				wg    sync.WaitGroup
				errs  = make([]error, burst)
				start = make(chan struct{})
			)
			for i := range burst {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, errs[i] = o.Generate(testCtx(t), backends.Request{Model: srv.Model, Prompt: "burst", MaxTokens: 16},
						func(string) error { return nil })
				}()
			}
			close(start)
			wg.Wait()

			var ok, overloaded int
			for _, err := range errs {
				switch {
				case err == nil:
					ok++
				case backends.KindOf(err) == backends.KindOverloaded:
					overloaded++
					var be *backends.Error
					errors.As(err, &be)
					if !strings.Contains(err.Error(), "server busy") || be.RetryAfter <= 0 {
						t.Errorf("overloaded error %v, retry after %v", err, be.RetryAfter)
					}
				default:
					t.Fatalf("unexpected error in burst: %v", err)
				}
			}
			t.Logf("attempt %d: %d served, %d overloaded", attempt, ok, overloaded)
			if ok == 0 {
				t.Fatal("no request of the burst was served")
			}
			if overloaded > 0 {
				return
			}
			if attempt == 3 {
				t.Fatal("no request of 3 bursts was refused as overloaded")
			}
			unload(t, srv)
		}
	})
}

// unload makes Ollama unload the model (a chat with no messages and keep_alive 0).
func unload(t testing.TB, srv *ollamatest.Server) {
	t.Helper()
	ctx := testCtx(t)
	c := srv.Client()
	req := &api.ChatRequest{Model: srv.Model, KeepAlive: &api.Duration{Duration: 0}}
	if err := c.Chat(ctx, req, func(api.ChatResponse) error { return nil }); err != nil {
		t.Fatalf("unloading the model: %v", err)
	}
	waitFor(t, "the model to unload", func() bool {
		ps, err := c.ListRunning(ctx)
		return err == nil && len(ps.Models) == 0
	})
}

// Two hosts, one dead: every request succeeds (failing over before the first piece), and the
// dead host ends up marked down.
func TestChatFailoverFromDeadHost(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		srv := sharedOllama(t)
		dead := deadPort(t)
		core, logs := observer.New(zap.WarnLevel)
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{"http://" + dead, srv.URL}, Logger: zap.New(core)})
		for i := 0; i < 10 && o.Hosts()[0].Healthy; i++ {
			stats, err := o.Generate(testCtx(t), backends.Request{Model: srv.Model, Prompt: "hi", MaxTokens: 4},
				func(string) error { return nil })
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			if stats.Host != srv.URL {
				t.Fatalf("served by %s", stats.Host)
			}
		}
		hs := o.Hosts()
		if hs[0].Healthy || !hs[1].Healthy {
			t.Fatalf("hosts %+v: want the dead one down, the live one up", hs)
		}
		if logs.FilterMessageSnippet("trying another host").Len() == 0 || logs.FilterMessageSnippet("is down").Len() == 0 {
			t.Errorf("failover not logged: %v", logs.All())
		}
	})
}

func TestOllamaCheckModelsReal(t *testing.T) {
	srv := sharedOllama(t)
	core, logs := observer.New(zap.InfoLevel)
	o := newChat(t, backends.ChatConfig{Hosts: []string{srv.URL}, Logger: zap.New(core)})
	if err := o.CheckModels(testCtx(t), []string{srv.Model, srv.Model + ":latest"}, false); err != nil {
		t.Fatal(err)
	}
	err := o.CheckModels(testCtx(t), []string{srv.Model, "missing-model"}, false)
	want := fmt.Sprintf("OLLAMA_HOST=%s ollama pull missing-model", srv.URL)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want it to contain %q", err, want)
	}
	entries := logs.FilterMessageSnippet("model missing").All()
	if len(entries) != 1 || entries[0].ContextMap()["command"] != want {
		t.Errorf("log entries %v", entries)
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ctx := testCtx(t)
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
