// Command openai-go calls caddy-textgen with the official OpenAI SDK for Go
// (github.com/openai/openai-go/v3), as docs/clients/openai/chat.mjs does in JavaScript:
//
//	TEXTGEN_KEY=tg_live_... go run ./docs/clients/openai-go summarizer "The text to summarize" [language]
//
// TEXTGEN_URL is the server (default http://localhost:8080), TEXTGEN_STREAM=1 streams the text as
// it is generated, TEXTGEN_TONE sets a tone (formal, friendly, direct, professional), and
// TEXTGEN_IDEMPOTENCY_KEY makes a retry safe (below). The text goes to stdout; one line of what it
// cost goes to stderr. Exit codes: 0 done, 1 an error, 2 out of credits (402), 3 no such tool.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: openai-go <tool> <input> [language]")
		os.Exit(1)
	}
	tool, input := os.Args[1], os.Args[2]
	server := os.Getenv("TEXTGEN_URL")
	if server == "" {
		server = "http://localhost:8080"
	}
	client := openai.NewClient(
		option.WithBaseURL(server+"/api/v1"),
		option.WithAPIKey(os.Getenv("TEXTGEN_KEY")), // sent as Authorization: Bearer <key>
		// The SDK retries a failed connection, 409, 429 and 5xx answers this many times (waiting
		// out Retry-After); a 402 is never retried.
		option.WithMaxRetries(2),
	)
	err := run(context.Background(), &client, tool, input)
	var apierr *openai.Error
	switch {
	case err == nil:
	case errors.As(err, &apierr):
		// Code is caddy-textgen's error code (insufficient_credits, key_budget_exhausted, ...).
		fmt.Fprintf(os.Stderr, "error status=%d code=%s %s\n", apierr.StatusCode, apierr.Code, apierr.Message)
		if apierr.StatusCode == http.StatusPaymentRequired {
			os.Exit(2)
		}
		os.Exit(1)
	default: // a network error, or a model failure in the middle of a stream (nothing charged)
		fmt.Fprintln(os.Stderr, "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, client *openai.Client, tool, input string) error {
	// A "model" is one of the tools: the models list holds the tools this key may call (free).
	found := false
	models := client.Models.ListAutoPaging(ctx)
	for models.Next() {
		found = found || models.Current().ID == tool
	}
	if err := models.Err(); err != nil {
		return err
	}
	if !found {
		fmt.Fprintf(os.Stderr, "no tool %q for this key (GET /api/v1/models lists them)\n", tool)
		os.Exit(3)
	}

	params := openai.ChatCompletionNewParams{
		Model:    tool,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(input)},
	}
	var httpResp *http.Response // the answer's headers: what it cost
	opts := []option.RequestOption{option.WithResponseInto(&httpResp)}
	// Fields of caddy-textgen that OpenAI has not; without them, the server's defaults.
	if len(os.Args) > 3 {
		opts = append(opts, option.WithJSONSet("language", os.Args[3]))
	}
	if tone := os.Getenv("TEXTGEN_TONE"); tone != "" {
		opts = append(opts, option.WithJSONSet("tone", tone))
	}
	// The SDK sends no Idempotency-Key of its own. Send one: if the network fails after the server
	// generated the text, the SDK's retry carries the same key and gets that text again instead of
	// paying a second credit.
	if key := os.Getenv("TEXTGEN_IDEMPOTENCY_KEY"); key != "" {
		opts = append(opts, option.WithHeader("Idempotency-Key", key))
	}

	var finishReason string
	var completionTokens int64
	if os.Getenv("TEXTGEN_STREAM") == "1" {
		params.StreamOptions.IncludeUsage = openai.Bool(true)
		stream := client.Chat.Completions.NewStreaming(ctx, params, opts...)
		for stream.Next() {
			chunk := stream.Current()
			if len(chunk.Choices) > 0 {
				fmt.Print(chunk.Choices[0].Delta.Content)
				if r := chunk.Choices[0].FinishReason; r != "" {
					finishReason = r
				}
			}
			if chunk.JSON.Usage.Valid() { // the last chunk
				completionTokens = chunk.Usage.CompletionTokens
			}
		}
		if err := stream.Err(); err != nil {
			return err
		}
	} else {
		completion, err := client.Chat.Completions.New(ctx, params, opts...)
		if err != nil {
			return err
		}
		fmt.Print(completion.Choices[0].Message.Content)
		finishReason, completionTokens = completion.Choices[0].FinishReason, completion.Usage.CompletionTokens
	}
	h := httpResp.Header
	fmt.Fprintf(os.Stderr, "credits_used=%s credits_remaining=%s request_id=%s finish_reason=%s completion_tokens=%d\n",
		h.Get("X-Credits-Used"), h.Get("X-Credits-Remaining"), h.Get("X-Request-Id"), finishReason, completionTokens)
	return nil
}
