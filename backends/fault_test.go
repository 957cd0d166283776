package backends_test

// Tests with ollamatest.FaultServer, the fake for faults the real Ollama cannot produce on demand.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/ollama/ollama/api"
)

func TestFaultsMapToKinds(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		// The short timeouts only trigger the stall cases; no case asserts how long anything took.
		const short = 100 * time.Millisecond
		cases := []struct {
			name       string
			fault      ollamatest.FaultConfig
			model      string // default: the fault's model
			req        backends.Request
			deadline   time.Duration // from the start of the case
			want       backends.Kind // KindInternal here means success
			wantPieces int
			wantText   string // in the error
		}{
			{name: "complete", fault: ollamatest.FaultConfig{Pieces: 5}, want: -1, wantPieces: 5},
			{name: "complete with delays", fault: ollamatest.FaultConfig{Pieces: 3, Delay: time.Millisecond}, want: -1, wantPieces: 3},
			{name: "error line after 3 pieces", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultErrorAfter, Pieces: 3, Message: "runner crashed"},
				want: backends.KindInterrupted, wantPieces: 3, wantText: "runner crashed"},
			{name: "error line before any piece", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultErrorAfter, Message: "bad prompt"},
				want: backends.KindUpstream, wantText: "bad prompt"},
			{name: "stall before the first piece", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultStall},
				req: backends.Request{FirstPieceTimeout: short}, want: backends.KindTimeout, wantText: "first piece"},
			{name: "stall after 2 pieces", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultStall, Pieces: 2},
				req: backends.Request{IdleTimeout: short}, want: backends.KindInterrupted, wantPieces: 2, wantText: "idle"},
			{name: "deadline before the first piece", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultStall},
				deadline: short, want: backends.KindTimeout, wantText: "deadline"},
			{name: "deadline after 2 pieces", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultStall, Pieces: 2},
				deadline: time.Second, want: backends.KindInterrupted, wantPieces: 2, wantText: "deadline"},
			{name: "malformed line after 2 pieces", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultMalformed, Pieces: 2},
				want: backends.KindInterrupted, wantPieces: 2},
			{name: "malformed first line", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultMalformed},
				want: backends.KindUpstream},
			{name: "dropped connection after 2 pieces", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultDrop, Pieces: 2},
				want: backends.KindInterrupted, wantPieces: 2},
			// Before any piece no headers went out either (as with Ollama): a crash before the
			// answer, so the host is down and another may take the request.
			{name: "dropped connection before any piece", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultDrop},
				want: backends.KindUnavailable},
			{name: "clean end without done after 2 pieces", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultEndWithoutDone, Pieces: 2},
				want: backends.KindInterrupted, wantPieces: 2, wantText: "without"},
			{name: "clean end without done and no piece", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultEndWithoutDone},
				want: backends.KindUpstream, wantText: "without"},
			{name: "503 busy", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultBusy},
				want: backends.KindOverloaded, wantText: "server busy"},
			{name: "500", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultStatus, Status: 500, Message: "llama runner process has terminated"},
				want: backends.KindUpstream, wantText: "terminated"},
			{name: "400", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultStatus, Status: 400, Message: "invalid options"},
				want: backends.KindUpstream, wantText: "invalid options"},
			// An over-long prompt refused by the server: vLLM's and llama.cpp server's 400, and
			// recent Ollama's with "truncate": false.
			{name: "400 maximum context length", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultStatus, Status: 400,
				Message: "This model's maximum context length is 4096 tokens. However, you requested 5120 tokens (4096 in the messages, 1024 in the completion)."},
				want: backends.KindTooLong, wantText: "maximum context length"},
			{name: "400 exceeds the context size", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultStatus, Status: 400,
				Message: "the request exceeds the available context size, try increasing it"},
				want: backends.KindTooLong, wantText: "context size"},
			{name: "400 input length exceeds the context length", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultStatus, Status: 400,
				Message: "the input length exceeds the context length"},
				want: backends.KindTooLong, wantText: "context length"},
			{name: "500 that mentions the context", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultStatus, Status: 500, Message: "context length exceeded while loading"},
				want: backends.KindUpstream, wantText: "context"},
			{name: "model not found", fault: ollamatest.FaultConfig{Pieces: 1}, model: "other",
				want: backends.KindModelMissing, wantText: "other"},
			{name: "429 with Retry-After", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultStatus, Status: 429, Message: "rate limit reached", RetryAfter: 7},
				want: backends.KindOverloaded, wantText: "rate limit reached"},
			{name: "503 with Retry-After", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultBusy, RetryAfter: 3},
				want: backends.KindOverloaded, wantText: "server busy"},
			// The finish without the end marker: complete (some OpenAI-compatible servers end so;
			// Ollama's done line is both).
			{name: "finish without end marker", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultNoEndMarker, Pieces: 2}, want: -1, wantPieces: 2},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				fs := ollamatest.NewFaultServerT(t, tc.fault)
				o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{fs.URL}})
				req := tc.req
				req.Model = tc.model
				if req.Model == "" {
					req.Model = ollamatest.DefaultModel
				}
				req.Prompt = "hi"
				if tc.deadline > 0 {
					req.Deadline = time.Now().Add(tc.deadline)
				}
				var pieces int
				stats, err := o.Generate(testCtx(t), req, func(string) error { pieces++; return nil })
				if pieces != tc.wantPieces || stats.Pieces != tc.wantPieces {
					t.Errorf("emitted %d pieces, stats say %d, want %d", pieces, stats.Pieces, tc.wantPieces)
				}
				if tc.want == -1 {
					if err != nil {
						t.Fatal(err)
					}
					if stats.OutputTokens != tc.wantPieces || stats.PromptTokens != 7 || stats.DoneReason != "stop" {
						t.Errorf("stats %+v", stats)
					}
					return
				}
				be := wantKind(t, err, tc.want)
				if be.Pieces != tc.wantPieces || be.Host != fs.URL {
					t.Errorf("error %+v: pieces %d host %q", be, be.Pieces, be.Host)
				}
				if !strings.Contains(err.Error(), tc.wantText) {
					t.Errorf("error %q does not contain %q", err, tc.wantText)
				}
				if tc.want == backends.KindOverloaded && be.RetryAfter <= 0 {
					t.Errorf("overloaded without a retry hint")
				}
				if ra := time.Duration(tc.fault.RetryAfter) * time.Second; ra > 0 && be.RetryAfter != ra {
					t.Errorf("retry after %v, want the server's %v", be.RetryAfter, ra)
				}
			})
		}
	})
}

// The watchdogs, deadline and caller's cancellation end the HTTP request, so the model server
// sees its client go away (Ollama then stops generating; see
// TestChatCancelStopsGenerationOnServer for the real server).
func TestStopsReachTheServer(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		cases := []struct {
			name  string
			fault ollamatest.FaultConfig
			req   backends.Request
			stop  func(cancel context.CancelFunc, n int) error // called from emit
			want  backends.Kind
		}{
			{name: "first-piece timeout", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultStall},
				req: backends.Request{FirstPieceTimeout: 50 * time.Millisecond}, want: backends.KindTimeout},
			{name: "idle timeout", fault: ollamatest.FaultConfig{Mode: ollamatest.FaultStall, Pieces: 1},
				req: backends.Request{IdleTimeout: 50 * time.Millisecond}, want: backends.KindInterrupted},
			{name: "emit error", fault: ollamatest.FaultConfig{Pieces: 1000, Delay: time.Millisecond},
				stop: func(_ context.CancelFunc, n int) error {
					if n == 3 {
						return errors.New("client gone")
					}
					return nil
				}, want: backends.KindCanceled},
			{name: "context cancelled", fault: ollamatest.FaultConfig{Pieces: 1000, Delay: time.Millisecond},
				stop: func(cancel context.CancelFunc, n int) error {
					if n == 3 {
						cancel()
					}
					return nil
				}, want: backends.KindCanceled},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				fs := ollamatest.NewFaultServerT(t, tc.fault)
				o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{fs.URL}})
				ctx, cancel := context.WithCancel(testCtx(t))
				defer cancel()
				req := tc.req
				req.Model, req.Prompt = ollamatest.DefaultModel, "hi"
				n := 0
				_, err := o.Generate(ctx, req, func(string) error {
					n++
					if tc.stop != nil {
						return tc.stop(cancel, n)
					}
					return nil
				})
				wantKind(t, err, tc.want)
				waitFor(t, "the server to see its client go away", func() bool { return fs.ClientGone() == 1 })
				waitFor(t, "the server to finish the request", func() bool { return fs.InFlight() == 0 })
				// Stopping closes the connection at once: the server does not go on streaming (a
				// backend that drained the rest first would let 1000 pieces through).
				if tc.fault.Pieces == 1000 && fs.PiecesSent() > 100 {
					t.Errorf("the server sent %d of 1000 pieces after the caller stopped at 3", fs.PiecesSent())
				}
			})
		}
	})
}

// A finished generation leaves its connection reusable (the rest of the body is read), so
// sequential requests share one connection.
func TestConnectionReused(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Delay: time.Millisecond})
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{fs.URL}})
		for range 5 {
			if _, err := o.Generate(testCtx(t), backends.Request{Model: ollamatest.DefaultModel, Prompt: "hi"}, func(string) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		if n := fs.Connections(); n != 1 {
			t.Errorf("%d connections for 5 sequential requests, want 1", n)
		}
	})
}

// Pieces are emitted as they arrive, not when the stream ends: this stream never ends.
func TestPiecesEmittedBeforeStreamEnds(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultStall, Pieces: 3})
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{fs.URL}})
		enough := errors.New("enough")
		n := 0
		_, err := o.Generate(testCtx(t), backends.Request{Model: ollamatest.DefaultModel, Prompt: "hi"}, func(string) error {
			if n++; n == 3 {
				return enough
			}
			return nil
		})
		if be := wantKind(t, err, backends.KindCanceled); be.Pieces != 3 || !errors.Is(err, enough) {
			t.Errorf("error %+v", be)
		}
	})
}

// Time spent in emit (a slow client) does not count toward the idle timeout.
func TestSlowEmitIsNotIdle(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		// Pieces 300 ms apart (three idle timeouts), so each arrives while the caller is still
		// busy with the one before (all at once, they would be read before the first emit and
		// no idle timer would run).
		fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Delay: 300 * time.Millisecond})
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{fs.URL}, IdleTimeout: 100 * time.Millisecond})
		emitted := int64(0)
		stats, err := o.Generate(testCtx(t), backends.Request{Model: ollamatest.DefaultModel, Prompt: "hi"}, func(string) error {
			// The slow client: busy until the server has sent the next piece, which it does
			// 300 ms after this one (or until the server saw the request end: an idle timeout
			// counted the time spent here).
			emitted++
			for emitted < 3 && fs.PiecesSent() <= emitted && fs.ClientGone() == 0 {
				time.Sleep(time.Millisecond)
			}
			return nil
		})
		if err != nil || stats.Pieces != 3 {
			t.Fatalf("stats %+v, err %v", stats, err)
		}
	})
}

// checkChatSent checks what both wires send of a request with System "sys" and Prompt "user
// text": the model, streaming, the system message and then the user's.
func checkChatSent(t *testing.T, got api.ChatRequest) {
	t.Helper()
	if got.Model != ollamatest.DefaultModel || got.Stream == nil || !*got.Stream {
		t.Errorf("model %q stream %v", got.Model, got.Stream)
	}
	if len(got.Messages) != 2 || got.Messages[0].Role != "system" || got.Messages[0].Content != "sys" ||
		got.Messages[1].Role != "user" || got.Messages[1].Content != "user text" {
		t.Errorf("messages %+v", got.Messages)
	}
}

// The OpenAI wire's request: the messages, max_tokens, temperature and seed, usage asked for,
// the bearer key; none of Ollama's options.
func TestRequestSentOpenAI(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 1})
	o := newChat(t, backends.ChatConfig{Wire: backends.NewOpenAIWire("sk-test-123"), Hosts: []string{fs.URL + "/v1"}})
	temp, seed := 0.25, 42
	_, err := o.Generate(testCtx(t), backends.Request{
		Model: ollamatest.DefaultModel, System: "sys", Prompt: "user text",
		Temperature: &temp, MaxTokens: 77, NumCtx: 4096, Seed: &seed,
	}, func(string) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	got := fs.LastRequest()
	checkChatSent(t, got)
	if got.Options["num_predict"] != 77.0 || got.Options["temperature"] != 0.25 || got.Options["seed"] != 42.0 ||
		got.Options["include_usage"] != true || got.Options["num_ctx"] != nil {
		t.Errorf("options %v", got.Options)
	}
	if a := fs.LastAuthorization(); a != "Bearer sk-test-123" {
		t.Errorf("authorization %q", a)
	}
	// Without a key, no Authorization header; a base URL without /v1 gets it added.
	o2 := newChat(t, backends.ChatConfig{Wire: backends.NewOpenAIWire(""), Hosts: []string{fs.URL}})
	if _, err := o2.Generate(testCtx(t), backends.Request{Model: ollamatest.DefaultModel, Prompt: "p"}, func(string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if a := fs.LastAuthorization(); a != "" {
		t.Errorf("authorization %q without a key", a)
	}
}

// The OpenAI wire's hosts need a scheme.
func TestOpenAIConfig(t *testing.T) {
	for _, cfg := range []backends.ChatConfig{
		{Wire: backends.NewOpenAIWire(""), Hosts: []string{"127.0.0.1:8000"}},
		{Wire: backends.NewOpenAIWire("k"), Hosts: []string{"http://127.0.0.1:1", "127.0.0.1:8000"}},
	} {
		if o, err := backends.NewChat(cfg); err == nil {
			o.Close()
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

// The model check of OpenAI-compatible hosts reads GET /v1/models and cannot pull.
func TestOpenAICheckModels(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 1})
	o := newChat(t, backends.ChatConfig{Wire: backends.NewOpenAIWire(""), Hosts: []string{fs.URL}})
	if err := o.CheckModels(testCtx(t), []string{ollamatest.DefaultModel}, false); err != nil {
		t.Fatal(err)
	}
	err := o.CheckModels(testCtx(t), []string{ollamatest.DefaultModel, "missing-model"}, true)
	if err == nil || !strings.Contains(err.Error(), `"missing-model" is not served`) {
		t.Fatalf("error %v", err)
	}
}

func TestRequestSentToOllama(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 1})
	keep := 90 * time.Second
	o := newChat(t, backends.ChatConfig{Hosts: []string{fs.URL}, Wire: backends.NewOllamaWire(&keep)})
	temp := 0.25
	_, err := o.Generate(testCtx(t), backends.Request{
		Model: ollamatest.DefaultModel, System: "sys", Prompt: "user text",
		Temperature: &temp, MaxTokens: 77, NumCtx: 4096,
	}, func(string) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	got := fs.LastRequest()
	checkChatSent(t, got)
	if got.Options["num_predict"] != 77.0 || got.Options["temperature"] != 0.25 || got.Options["num_ctx"] != 4096.0 {
		t.Errorf("options %v", got.Options)
	}
	if got.KeepAlive == nil || got.KeepAlive.Duration != keep {
		t.Errorf("keep_alive %v", got.KeepAlive)
	}

	// Defaults: no system message, no options, no keep_alive (Ollama's own defaults apply).
	o2 := newChat(t, backends.ChatConfig{Hosts: []string{fs.URL}})
	if _, err := o2.Generate(testCtx(t), backends.Request{Model: ollamatest.DefaultModel, Prompt: "p"}, func(string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	got = fs.LastRequest()
	if len(got.Messages) != 1 || len(got.Options) != 0 || got.KeepAlive != nil {
		t.Errorf("request %+v", got)
	}
}

// An overloaded host hands the request to another one; an error after text went out never
// fails over.
func TestFailoverOnlyBeforeFirstPiece(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		good := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 4})
		busy := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultBusy})
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{busy.URL, good.URL}})
		for i := 0; i < 6; i++ {
			stats, err := o.Generate(testCtx(t), backends.Request{Model: ollamatest.DefaultModel, Prompt: "hi"}, func(string) error { return nil })
			if err != nil || stats.Host != good.URL {
				t.Fatalf("request %d: %+v %v", i, stats, err)
			}
		}
		if busy.Requests() == 0 {
			t.Error("the busy host was never tried")
		}
		if hs := o.Hosts(); !hs[0].Healthy {
			t.Error("an overloaded host was marked down")
		}

		broken := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultErrorAfter, Pieces: 2})
		good2 := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 4})
		o2 := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{broken.URL, good2.URL}})
		failed := 0
		for i := 0; i < 6; i++ {
			before := good2.Requests()
			_, err := o2.Generate(testCtx(t), backends.Request{Model: ollamatest.DefaultModel, Prompt: "hi"}, func(string) error { return nil })
			if err == nil {
				continue
			}
			failed++
			if be := wantKind(t, err, backends.KindInterrupted); be.Pieces != 2 || be.Host != broken.URL {
				t.Errorf("error %+v", be)
			}
			if good2.Requests() != before {
				t.Error("failed over after text was emitted")
			}
		}
		if failed == 0 {
			t.Error("the broken host was never tried")
		}
	})
}

func TestAllHostsDown(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{"http://" + deadPort(t), "http://" + deadPort(t)}})
		_, err := o.Generate(testCtx(t), backends.Request{Model: "m", Prompt: "hi"}, func(string) error { return nil })
		be := wantKind(t, err, backends.KindUnavailable)
		if !strings.Contains(be.Err.Error(), "refused") {
			t.Errorf("error %v", err)
		}
		for _, h := range o.Hosts() {
			if h.Healthy {
				t.Errorf("host %+v still healthy", h)
			}
		}
		if err := o.Check(testCtx(t)); err == nil {
			t.Error("Check found a host up")
		}
	})
}

func TestBusyAndDownReportsOverloaded(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		busy := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultBusy})
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{"http://" + deadPort(t), busy.URL}})
		_, err := o.Generate(testCtx(t), backends.Request{Model: ollamatest.DefaultModel, Prompt: "hi"}, func(string) error { return nil })
		wantKind(t, err, backends.KindOverloaded)
	})
}

func TestMaxInFlight(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultStall})
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{fs.URL}, MaxInFlight: 1})
		ctx, cancel := context.WithCancel(testCtx(t))
		done := make(chan error, 1)
		go func() {
			_, err := o.Generate(ctx, backends.Request{Model: ollamatest.DefaultModel, Prompt: "hi"}, func(string) error { return nil })
			done <- err
		}()
		waitFor(t, "the first request to be in flight", func() bool { return o.Hosts()[0].InFlight == 1 })
		_, err := o.Generate(testCtx(t), backends.Request{Model: ollamatest.DefaultModel, Prompt: "hi"}, func(string) error { return nil })
		wantKind(t, err, backends.KindOverloaded)
		if fs.Requests() != 1 {
			t.Errorf("the server got %d requests, want 1", fs.Requests())
		}
		cancel()
		wantKind(t, <-done, backends.KindCanceled)
		if n := o.Hosts()[0].InFlight; n != 0 {
			t.Errorf("in flight %d after both ended", n)
		}
	})
}

func TestHealthCheckerBringsHostBack(t *testing.T) {
	eachAPI(t, func(t *testing.T, api string) {
		addr := deadPort(t)
		core, logs := observer.New(zap.InfoLevel)
		o := newChat(t, backends.ChatConfig{Wire: wireOf(api), Hosts: []string{"http://" + addr}, HealthInterval: 20 * time.Millisecond, Logger: zap.New(core)})
		if err := o.Check(testCtx(t)); err == nil {
			t.Fatal("Check found the dead host up")
		}
		if o.Hosts()[0].Healthy {
			t.Fatal("dead host healthy")
		}
		revived, err := ollamatest.NewFaultServerOn(addr, ollamatest.FaultConfig{Pieces: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer revived.Close()
		waitFor(t, "the host to be marked up", func() bool { return o.Hosts()[0].Healthy })
		if _, err := o.Generate(testCtx(t), backends.Request{Model: ollamatest.DefaultModel, Prompt: "hi"}, func(string) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if revived.Requests() != 1 {
			t.Errorf("revived host got %d requests", revived.Requests())
		}
		if logs.FilterMessage("model server host is back").Len() != 1 || logs.FilterMessageSnippet("is down").Len() != 1 {
			t.Errorf("logs %v", logs.All())
		}
	})
}
