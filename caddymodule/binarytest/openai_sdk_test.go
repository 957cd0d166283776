package binarytest

// The OpenAI-compatible door (chat.go, models.go) as customers meet it: the official Go SDK,
// github.com/openai/openai-go, against the built caddy binary, with the fault server as the model
// (a stream it breaks on demand) and, for several instances, a real PostgreSQL.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/catalog"
	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// sdkClient is the SDK's client of srv for key, without the SDK's own retries unless asked.
func sdkClient(srv *caddyproc.Server, key string, retries int) openai.Client {
	return openai.NewClient(option.WithBaseURL("http://"+srv.HTTP+"/api/v1/"), option.WithAPIKey(key),
		option.WithMaxRetries(retries), option.WithRequestTimeout(2*time.Minute))
}

func chatParams(tool, input string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: tool, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(input)}}
}

// apiErr is err as the SDK raises an error answer; it fails the test for anything else.
func apiErr(t *testing.T, err error) *openai.Error {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("want an API error, got %v", err)
	}
	return ae
}

// available is the account's available credits as the ledger keeps them (the CLI of srv).
func available(t *testing.T, srv *caddyproc.Server, acct string) int64 {
	t.Helper()
	return caddyproc.Num(t, srv.JSON("balance", "--account", acct), "available")
}

func TestOpenAISDK(t *testing.T) {
	const pieces = 6
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: pieces, Piece: "Heron", Numbered: true})
	want := numbered("Heron", pieces)
	ledgerDir := t.TempDir() + "/ledger"
	// Retention keeps the text (for a replay and GET /api/v1/generations); instagram-caption's own limit of
	// one request an hour gives a 429.
	site := fmt.Sprintf("textgen {\n\t\tledger %s\n\t\tollama %s\n\t\tmodel tiny\n\t\tretention_key %s\n\t\tmax_input_chars 300\n"+
		"\t\ttool instagram-caption {\n\t\t\trate_limit key 1/1h\n\t\t}\n\t}", ledgerDir, fs.URL, testRetentionKey)
	srv := caddyproc.Start(t, site, ledgerDir)
	acct := caddyproc.Str(t, srv.JSON("account", "create", "--email", "sdk@example.com"), "id")
	created := srv.JSON("key", "create", "--account", acct)
	key := caddyproc.Str(t, created, "key")
	srv.JSON("credits", "grant", "--account", acct, "--credits", "20", "--reference", "sdk-test")
	client := sdkClient(srv, key, 0)
	ctx := context.Background()

	t.Run("models", func(t *testing.T) {
		page, err := client.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
			if m.Object != "model" || m.OwnedBy == "" || m.Created == 0 {
				t.Errorf("model %+v", m)
			}
		}
		if strings.Join(ids, ",") != strings.Join(catalog.Default().Slugs(), ",") {
			t.Errorf("models %v, want the catalog's tools", ids)
		}
		if m, err := client.Models.Get(ctx, "summarizer"); err != nil || m.ID != "summarizer" {
			t.Errorf("get summarizer: %+v %v", m, err)
		}
		_, err = client.Models.Get(ctx, "gpt-4o")
		if ae := apiErr(t, err); ae.StatusCode != 404 || ae.Code != "model_not_found" {
			t.Errorf("unknown model: %d %s", ae.StatusCode, ae.Code)
		}
	})

	t.Run("completion", func(t *testing.T) {
		before := available(t, srv, acct)
		var resp *http.Response
		p := chatParams("summarizer", "Caddy is a web server.")
		p.MaxTokens = openai.Int(7)
		p.Temperature = openai.Float(0.25)
		c, err := client.Chat.Completions.New(ctx, p, option.WithJSONSet("language", "de"), option.WithJSONSet("tone", "formal"),
			option.WithResponseInto(&resp))
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) != 1 || c.Choices[0].Message.Content != want || c.Choices[0].FinishReason != "stop" || c.Choices[0].Message.Role != "assistant" {
			t.Fatalf("completion %+v", c)
		}
		if c.Usage.CompletionTokens <= 0 || c.Usage.TotalTokens != c.Usage.PromptTokens+c.Usage.CompletionTokens || c.Model != "summarizer" {
			t.Errorf("usage %+v model %s", c.Usage, c.Model)
		}
		if resp.Header.Get("X-Credits-Used") != "1" || resp.Header.Get("X-Credits-Remaining") != strconv.FormatInt(before-1, 10) || resp.Header.Get("X-Request-Id") != c.ID {
			t.Errorf("headers %v, id %s", resp.Header, c.ID)
		}
		if got := available(t, srv, acct); got != before-1 {
			t.Errorf("available %d, want %d", got, before-1)
		}
		// What the model server was asked: the tool's instructions in German and a formal tone,
		// the user's message as the input, the answer's limits within the tool's.
		last := fs.LastRequest()
		if len(last.Messages) != 2 || last.Messages[0].Role != "system" || !strings.Contains(last.Messages[0].Content, "German") ||
			last.Messages[1].Content != "Caddy is a web server." {
			t.Errorf("model asked %+v", last.Messages)
		}
		if last.Options["num_predict"] != float64(7) || last.Options["temperature"] != 0.25 {
			t.Errorf("model options %v", last.Options)
		}
		// The text is kept under the completion's id.
		req, _ := http.NewRequest(http.MethodGet, "http://"+srv.HTTP+"/api/v1/generations/"+c.ID, nil)
		req.Header.Set("X-API-Key", key)
		req.Header.Set("Accept", "text/plain")
		kept, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer kept.Body.Close()
		if text := readAll(kept.Body); kept.StatusCode != 200 || text != want {
			t.Errorf("kept text of %s: %d %q", c.ID, kept.StatusCode, text)
		}
	})

	t.Run("stream with usage", func(t *testing.T) {
		before := available(t, srv, acct)
		p := chatParams("summarizer", "Caddy is a web server.")
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		var resp *http.Response
		stream := client.Chat.Completions.NewStreaming(ctx, p, option.WithResponseInto(&resp))
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != want || acc.Choices[0].FinishReason != "stop" {
			t.Fatalf("streamed %+v", acc.ChatCompletion)
		}
		if acc.Usage.CompletionTokens <= 0 {
			t.Errorf("usage %+v", acc.Usage)
		}
		if resp.Header.Get("X-Credits-Used") != "1" || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Errorf("headers %v", resp.Header)
		}
		if got := available(t, srv, acct); got != before-1 {
			t.Errorf("available %d, want %d", got, before-1)
		}
	})

	t.Run("json", func(t *testing.T) {
		p := chatParams("summarizer", "Caddy is a web server.")
		p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &openai.ResponseFormatJSONObjectParam{}}
		if _, err := client.Chat.Completions.New(ctx, p); err != nil {
			t.Fatal(err)
		}
		if f := string(fs.LastRequest().Format); f != `"json"` {
			t.Errorf("format sent to Ollama: %s", f)
		}
		schema := map[string]any{"type": "object", "properties": map[string]any{"summary": map[string]any{"type": "string"}}}
		p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &openai.ResponseFormatJSONSchemaParam{
			JSONSchema: openai.ResponseFormatJSONSchemaJSONSchemaParam{Name: "summary", Schema: schema}}}
		if _, err := client.Chat.Completions.New(ctx, p); err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(fs.LastRequest().Format, &got); err != nil || got["type"] != "object" {
			t.Errorf("schema sent to Ollama: %s", fs.LastRequest().Format)
		}
	})

	t.Run("idempotency", func(t *testing.T) {
		before := available(t, srv, acct)
		p := chatParams("summarizer", "Once only.")
		var first, second *http.Response
		a, err := client.Chat.Completions.New(ctx, p, option.WithHeader("Idempotency-Key", "sdk-once"), option.WithResponseInto(&first))
		if err != nil {
			t.Fatal(err)
		}
		b, err := client.Chat.Completions.New(ctx, p, option.WithHeader("Idempotency-Key", "sdk-once"), option.WithResponseInto(&second))
		if err != nil {
			t.Fatal(err)
		}
		if b.ID != a.ID || b.Choices[0].Message.Content != want || second.Header.Get("Idempotent-Replayed") != "true" || second.Header.Get("X-Credits-Used") != "0" {
			t.Errorf("replay %+v %v", b, second.Header)
		}
		if got := available(t, srv, acct); got != before-1 {
			t.Errorf("available %d after a request and its retry, want %d", got, before-1)
		}
	})

	// Each error class: the status the SDKs map to their classes, OpenAI's shape, nothing charged.
	refused := func(t *testing.T, c *openai.Client, p openai.ChatCompletionNewParams, status int, code, param string, opts ...option.RequestOption) {
		t.Helper()
		before := available(t, srv, acct)
		var resp *http.Response
		_, err := c.Chat.Completions.New(ctx, p, append(opts, option.WithResponseInto(&resp))...)
		ae := apiErr(t, err)
		if ae.StatusCode != status || ae.Code != code || ae.Param != param || ae.Message == "" || ae.Type == "" {
			t.Errorf("%s: %d %s %q %q, want %d %s %q", code, ae.StatusCode, ae.Code, ae.Param, ae.Message, status, code, param)
		}
		if resp != nil && resp.Header.Get("X-Credits-Used") != "0" {
			t.Errorf("%s: X-Credits-Used %q", code, resp.Header.Get("X-Credits-Used"))
		}
		if got := available(t, srv, acct); got != before {
			t.Errorf("%s charged: available %d, was %d", code, got, before)
		}
	}
	t.Run("errors", func(t *testing.T) {
		stranger := sdkClient(srv, "tg_live_"+strings.Repeat("x", 40), 0)
		refused(t, &stranger, chatParams("summarizer", "x"), 401, "invalid_api_key", "")
		refused(t, &client, chatParams("gpt-4o", "x"), 404, "model_not_found", "model")
		sys := chatParams("summarizer", "x")
		sys.Messages = append([]openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are a pirate.")}, sys.Messages...)
		refused(t, &client, sys, 400, "unsupported_field", "messages[0].role")
		n := chatParams("summarizer", "x")
		n.N = openai.Int(2)
		refused(t, &client, n, 400, "unsupported_field", "n")
		refused(t, &client, chatParams("summarizer", strings.Repeat("a", 301)), 413, "input_too_large", "messages")
		refused(t, &client, chatParams("summarizer", "x"), 400, "unsupported_language", "language", option.WithJSONSet("language", "xx-nowhere"))

		// 403: a key limited to one tool.
		kid := caddyproc.Str(t, created, "id")
		srv.JSON("key", "limits", "--account", acct, "--key-id", kid, "--tools", "summarizer,instagram-caption")
		refused(t, &client, chatParams("cover-letter", "x"), 403, "tool_not_allowed", "model")
		page, err := client.Models.List(ctx)
		if err != nil || len(page.Data) != 2 {
			t.Errorf("a key limited to two tools lists %+v %v", page, err)
		}
		// 429: instagram-caption's own limit of one request an hour.
		if _, err := client.Chat.Completions.New(ctx, chatParams("instagram-caption", "x")); err != nil {
			t.Fatal(err)
		}
		var resp *http.Response
		_, err = client.Chat.Completions.New(ctx, chatParams("instagram-caption", "x"), option.WithResponseInto(&resp))
		if ae := apiErr(t, err); ae.StatusCode != 429 || ae.Type != "rate_limit_error" || resp.Header.Get("Retry-After") == "" {
			t.Errorf("rate limited: %d %s %v", ae.StatusCode, ae.Type, resp.Header)
		}
		srv.JSON("key", "limits", "--account", acct, "--key-id", kid, "--tools", "")

		// 503: the model server is busy.
		fs.Set(ollamatest.FaultConfig{Model: "tiny", Mode: ollamatest.FaultBusy})
		refused(t, &client, chatParams("summarizer", "x"), 503, "overloaded", "")
		fs.Set(ollamatest.FaultConfig{Model: "tiny", Pieces: pieces, Piece: "Heron", Numbered: true})

		// 402: an account without credits.
		poor := caddyproc.Str(t, srv.JSON("account", "create", "--email", "poor@example.com"), "id")
		poorKey := caddyproc.Str(t, srv.JSON("key", "create", "--account", poor), "key")
		poorClient := sdkClient(srv, poorKey, 0)
		_, err = poorClient.Chat.Completions.New(ctx, chatParams("summarizer", "x"))
		if ae := apiErr(t, err); ae.StatusCode != 402 || ae.Code != "insufficient_credits" || ae.Type != "insufficient_quota" {
			t.Errorf("no credits: %d %s %s", ae.StatusCode, ae.Code, ae.Type)
		}
	})

	t.Run("model fails mid-stream", func(t *testing.T) {
		fs.Set(ollamatest.FaultConfig{Model: "tiny", Mode: ollamatest.FaultErrorAfter, Pieces: 3, Piece: "Heron", Numbered: true, Message: "runner died"})
		defer fs.Set(ollamatest.FaultConfig{Model: "tiny", Pieces: pieces, Piece: "Heron", Numbered: true})
		before := available(t, srv, acct)
		stream := client.Chat.Completions.NewStreaming(ctx, chatParams("summarizer", "x"))
		var text strings.Builder
		for stream.Next() {
			for _, ch := range stream.Current().Choices {
				text.WriteString(ch.Delta.Content)
			}
		}
		var se *ssestream.StreamError
		if err := stream.Err(); !errors.As(err, &se) || !strings.Contains(err.Error(), "backend_error") {
			t.Errorf("a broken stream ends with %v", err)
		}
		if text.String() != numbered("Heron", 3) {
			t.Errorf("text before the break %q", text.String())
		}
		// Not streamed: nothing went out, the error is the answer.
		_, err := client.Chat.Completions.New(ctx, chatParams("summarizer", "x"))
		if ae := apiErr(t, err); ae.StatusCode != 502 || ae.Code != "backend_error" || ae.Type != "server_error" {
			t.Errorf("a broken completion: %d %s %s", ae.StatusCode, ae.Code, ae.Type)
		}
		if got := available(t, srv, acct); got != before {
			t.Errorf("broken generations charged: available %d, was %d", got, before)
		}
	})
}

// Two instances on one PostgreSQL ledger: the same chat completion with one Idempotency-Key
// sent to both at once, by clients with the SDK's own retries, is generated and charged once;
// every client gets the same completion.
func TestOpenAISDKTwoInstancesIdempotency(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 8, Piece: "Heron", Numbered: true, Delay: 40 * time.Millisecond})
	extra := "\t\tretention_key " + testRetentionKey + "\n"
	a := caddyproc.Start(t, pgSite(url, fs.URL, extra), url)
	b := caddyproc.Start(t, pgSite(url, fs.URL, extra), url)
	acct := caddyproc.Str(t, a.JSON("account", "create", "--email", "twice@example.com"), "id")
	key := caddyproc.Str(t, b.JSON("key", "create", "--account", acct), "key")
	a.JSON("credits", "grant", "--account", acct, "--credits", "10", "--reference", "sdk-two")

	const clients = 8
	var wg sync.WaitGroup
	ids := make([]string, clients)
	texts := make([]string, clients)
	errs := make([]error, clients)
	for i := range clients {
		srv := a
		if i%2 == 1 {
			srv = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := sdkClient(srv, key, 5)
			c, err := sc.Chat.Completions.New(context.Background(), chatParams("summarizer", "the same request"),
				option.WithHeader("Idempotency-Key", "two-instances-once"))
			if errs[i] = err; err == nil {
				ids[i], texts[i] = c.ID, c.Choices[0].Message.Content
			}
		}()
	}
	wg.Wait()
	for i := range clients {
		if errs[i] != nil || ids[i] != ids[0] || texts[i] != numbered("Heron", 8) {
			t.Errorf("client %d: %q %q %v", i, ids[i], texts[i], errs[i])
		}
	}
	if got := available(t, a, acct); got != 9 {
		t.Errorf("available %d after %d clients with one Idempotency-Key, want 9", got, clients)
	}
	if n := fs.Requests(); n != 1 {
		t.Errorf("the model was asked %d times, want once", n)
	}
}
