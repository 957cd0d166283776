// Package caddymodule adapts the ledger and the model backends to Caddy: the HTTP handler
// http.handlers.textgen (POST /api/v1/generate, GET /api/v1/generations/{request_id},
// GET /api/v1/tools, GET /api/v1/balance, POST /api/v1/credits/redeem, GET /api/v1/ready) and
// its Caddyfile directive textgen. My Account is in caddymodule/account,
// the admin API and the caddy textgen commands in caddymodule/operator, the resources they share
// in caddymodule/internal/textgenapp.
package caddymodule

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/catalog"
	"github.com/caddy-textgen/textgen/caddymodule/internal/inflight"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/caddymodule/wires"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler is the paid text-generation API: it checks the API key, reserves one credit, builds
// the prompt of the requested tool and streams the generated text from the model servers.
//
// It answers POST /api/v1/generate, GET /api/v1/generations/{request_id}, GET /api/v1/tools,
// GET /api/v1/balance and GET /api/v1/ready under whatever matcher routes requests to it; other
// paths get a JSON 404.
type Handler struct {
	// Ledger is where accounts, keys and credits are kept: the directory of an embedded Badger
	// database (one Caddy instance), or the URL of a PostgreSQL database (postgres://...,
	// several instances share it). Placeholders such as {env.TEXTGEN_DATABASE_URL} are
	// resolved at start. Required. Several handlers (and config reloads) naming the same ledger
	// share one open database.
	Ledger string `json:"ledger,omitempty"`
	// LedgerCacheAccounts is how many accounts a Badger ledger keeps in memory once their
	// requests are done (with their keys, about 5 KB each); default 50,000. Accounts beyond it
	// are read from the disk on their next request. It counts when the ledger is opened: handlers
	// sharing a directory get the largest any of them asked, until the ledger is closed (a
	// restart). Not for a PostgreSQL ledger.
	LedgerCacheAccounts int `json:"ledger_cache_accounts,omitempty"`

	// WireRaw is the model servers and the API they speak: a textgen.wires module named by
	// "api": "ollama" (Ollama's own API: hosts, keep_alive, pull_models), "openai"
	// (OpenAI-compatible servers: hosts, api_key) or the wire of another plugin. Default:
	// {"api": "ollama"}, Ollama at $OLLAMA_HOST, else http://127.0.0.1:11434.
	WireRaw json.RawMessage `json:"wire,omitempty" caddy:"namespace=textgen.wires inline_key=api"`

	// Model is the model of every tool that does not name its own. Default: llama3.2.
	Model string `json:"model,omitempty"`

	// MaxInputChars is the longest input, in Unicode characters, of every tool without its own
	// setting in Tools. When set, it beats the built-in values of the tools. Default: the tool's
	// built-in value, else 20000.
	MaxInputChars int `json:"max_input_chars,omitempty"`

	// MaxBodyBytes caps the request body. Default: 262144 (256 KiB).
	MaxBodyBytes int64 `json:"max_body_bytes,omitempty"`

	// MaxOutputTokens is the most tokens a generation may produce (Ollama's num_predict), for
	// every tool without its own setting in Tools. When set, it beats the built-in values of the
	// tools. Default: the tool's built-in value, else 1024.
	MaxOutputTokens int `json:"max_output_tokens,omitempty"`

	// Temperature of every tool without its own setting in Tools. When set, it beats the
	// built-in values of the tools. Default: the tool's built-in value, else the model's own.
	Temperature *float64 `json:"temperature,omitempty"`

	// NumCtx is the context size (in tokens) the model servers run every model with, on a wire
	// that takes it (Ollama's; refused where none does). Default: sized per
	// model for the tools that use it (their longest system prompt, max_input_chars and
	// max_output_tokens), at most the model's window (context.go).
	NumCtx int `json:"num_ctx,omitempty"`
	// Contexts are models' windows in tokens, by model name, for model servers that do not
	// report them (most OpenAI-compatible ones) or to use less than they report.
	Contexts map[string]int `json:"context,omitempty"`

	// Seed fixes the model's sampling seed (Ollama's seed option), so that the same request
	// gives the same text (tests, reproducible output). Default: none (a random seed per
	// generation).
	Seed *int `json:"seed,omitempty"`

	// Languages is the set of accepted output languages (BCP 47 base languages; regional
	// variants such as pt-BR are accepted when their base is in the set). Default: the 24 official
	// EU languages plus tr, uk, ru, ar, zh and ja.
	Languages []string `json:"languages,omitempty"`

	// DefaultLanguage is the language of a chat completion (POST /api/v1/chat/completions) that
	// names none: one of Languages, as a BCP 47 tag. Default: en.
	DefaultLanguage string `json:"default_language,omitempty"`

	// Tools overrides settings of single tools, keyed by slug.
	Tools map[string]*ToolConfig `json:"tools,omitempty"`

	// ConnectTimeout bounds connecting to an Ollama host. Default: 5s.
	ConnectTimeout caddy.Duration `json:"connect_timeout,omitempty"`
	// FirstPieceTimeout bounds the wait for the first piece of text; past it the client gets 504
	// and no charge. Default: 60s.
	FirstPieceTimeout caddy.Duration `json:"first_piece_timeout,omitempty"`
	// IdleTimeout bounds the wait between two pieces; past it the response is aborted and the
	// credit returned. Default: 30s.
	IdleTimeout caddy.Duration `json:"idle_timeout,omitempty"`
	// WriteTimeout bounds writing one piece of text to the client. A client that reads nothing
	// for this long (its connection's buffers are full) has its response aborted: its model
	// place, its account's place and its credit are freed at once, and the text it was sent is
	// charged. No write outlives GenerationTimeout either. The deadline of a write is armed
	// again only when it would move by more than a tenth of WriteTimeout, so a write is cut
	// after 0.9 to 1 times it. Default: 30s.
	WriteTimeout caddy.Duration `json:"write_timeout,omitempty"`
	// GenerationTimeout bounds a whole generation. Default: 5m.
	GenerationTimeout caddy.Duration `json:"generation_timeout,omitempty"`
	// HoldTTL is how long an unresolved hold (a crash mid-request) lives before it is voided.
	// Default: GenerationTimeout plus 5 minutes.
	HoldTTL caddy.Duration `json:"hold_ttl,omitempty"`

	// BuyURL is where the 402 message tells clients to buy credits. Default: the address of the
	// config's textgen_account on the same ledger (its public_url and path), else the message
	// tells them to ask the operator.
	BuyURL string `json:"buy_url,omitempty"`

	// LogPrompts logs the prompts and the generated text at debug level. Default: off. Never
	// enable it where inputs may hold personal data.
	LogPrompts bool `json:"log_prompts,omitempty"`

	// RateLimit limits the generate requests per API key and per account (429 rate_limited).
	// Default: per key 60 per minute with a burst of 20, per account 120 per minute; a limit
	// with "off": true is off. A tool's own RateLimit adds to these.
	RateLimit *RateLimits `json:"rate_limit,omitempty"`
	// AuthFailureLimit limits the requests with an invalid API key per client address (an
	// IPv6 address counts by its /64); past it the address gets 429 rate_limited before its key
	// is even looked up. Default: 30 per minute.
	AuthFailureLimit *RateLimit `json:"auth_failure_limit,omitempty"`
	// MaxConcurrentPerAccount caps the generations one account runs at once (429
	// too_many_concurrent_requests). Default: 4; -1: no cap.
	MaxConcurrentPerAccount int `json:"max_concurrent_per_account,omitempty"`
	// SSEKeepAlive is how often an SSE stream gets a comment line (": keep-alive") while the
	// model has not sent its first piece, so that proxies that cut idle connections keep it.
	// Default: 5s; -1 (off): none. Plain-text streams never get one.
	SSEKeepAlive caddy.Duration `json:"sse_keepalive,omitempty"`

	// CORSOrigins are the origins of browser apps that may call the API (CORS, without
	// credentials), or "*" for any. Default: none (browsers keep other origins' pages out).
	CORSOrigins []string `json:"cors_origins,omitempty"`

	// LimitsStore keeps the limits above (rate limits, failed authentications, concurrent
	// generations) and max_in_flight in Redis, shared by every instance that names the same
	// store and ledger: redis://[user:password@]host:port/db (rediss:// for TLS), placeholders
	// resolved at start. Default: each instance counts in its own memory. While Redis cannot
	// answer, each instance counts its share of every limit in its own memory (docs/SCALING.md,
	// "the limits on Redis").
	LimitsStore string `json:"limits_store,omitempty"`
	// SlotExpiry is how long a concurrent place kept in Redis outlives an instance that died
	// holding it (the instance renews its places three times per expiry). Default: 30s.
	SlotExpiry caddy.Duration `json:"slot_expiry,omitempty"`
	// MaxInFlight caps the generations sent to one Ollama host at once; more wait in the
	// admission queue. Default: 8; -1: no cap.
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// QueueSize is how many generations may wait for a host; one more gets 503 overloaded.
	// Default: 32; -1: no queue.
	QueueSize int `json:"queue_size,omitempty"`
	// QueueTimeout is the longest wait in the admission queue; then 503 overloaded. Default: 10s.
	QueueTimeout caddy.Duration `json:"queue_timeout,omitempty"`
	// BodyReadTimeout bounds reading the request body; a slower client gets 408
	// request_timeout. Default: 10s.
	BodyReadTimeout caddy.Duration `json:"body_read_timeout,omitempty"`

	// Retention is how long the text of a charged generation is kept (encrypted, in the ledger)
	// for GET /api/v1/generations/{request_id} and Idempotency-Key replays; while it is on, a
	// generation that has delivered text runs to its end after its client left. Negative
	// (Caddyfile: off): no generation is kept, and a client that leaves stops its generation.
	// Default: 15m.
	Retention caddy.Duration `json:"retention,omitempty"`
	// RetentionKey is the AES-256 key of kept text: 32 bytes in base64, placeholders such as
	// {env.TEXTGEN_RETENTION_KEY} resolved at load. Instances sharing a PostgreSQL ledger must set
	// the same key. Default: a random key made once and kept in Caddy's data directory
	// (textgen/retention.key, mode 0600), never in the ledger's directory.
	RetentionKey string `json:"retention_key,omitempty"`

	// inFlight keeps the shared ledger and backend until the last request of this config ends:
	// Caddy cleans up the old config of a reload while its requests may still stream.
	inFlight *inflight.Guard

	logger      *zap.Logger
	wire        wires.Module          // WireRaw, loaded
	ledgerRef   *textgenapp.LedgerRef // opened by the textgen app's Start
	app         *textgenapp.App       // this config's: where My Account is (generate.go insufficient)
	provisioned time.Time             // when this config was provisioned: its models' created (models.go)
	serversRef  *textgenapp.ServersRef
	tools       map[string]*toolRuntime
	languages   *catalog.LanguageMatcher
	catalog     *catalog.Catalog // the tools with their prompt files (GET /api/v1/tools)
	lim         *limits
	receipts    *receiptSigning // receipts.go; nil with retention off
	// retain keeps generations' text (retention.go); nil when Retention is off.
	retain *retention
	// contexts are the models' contexts (context.go).
	contexts *modelContexts
}

// ToolConfig overrides the settings of one tool.
type ToolConfig struct {
	// Model for this tool. Default: the handler's Model.
	Model string `json:"model,omitempty"`
	// PromptFile replaces the tool's built-in system prompt with the file's contents (read once,
	// at config load). The file may start with the same header as the built-in prompts.
	PromptFile string `json:"prompt_file,omitempty"`
	// MaxInputChars for this tool. Default: the handler's.
	MaxInputChars int `json:"max_input_chars,omitempty"`
	// MaxOutputTokens for this tool. Default: the handler's.
	MaxOutputTokens int `json:"max_output_tokens,omitempty"`
	// Temperature for this tool. Default: the handler's.
	Temperature *float64 `json:"temperature,omitempty"`
	// Credits is the tool's price: what one request holds and a complete answer charges.
	// Default: 1.
	Credits int64 `json:"credits,omitempty"`
	// RateLimit adds limits per key and per account for the requests of this tool alone; the
	// handler-wide limits still count them too. Default: none.
	RateLimit *RateLimits `json:"rate_limit,omitempty"`
	// WireRaw gives this tool model servers of its own, as the handler's wire; the handler's
	// timeouts and admission settings apply. Default: the handler's servers.
	WireRaw json.RawMessage `json:"wire,omitempty" caddy:"namespace=textgen.wires inline_key=api"`

	wire wires.Module // WireRaw, loaded; nil: the handler's
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.textgen",
		New: func() caddy.Module { return new(Handler) },
	}
}

const (
	defaultModel             = "llama3.2"
	defaultMaxInputChars     = 20000
	defaultMaxBodyBytes      = 256 << 10
	defaultMaxOutputTokens   = 1024
	defaultConnectTimeout    = 5 * time.Second
	defaultFirstPieceTimeout = 60 * time.Second
	defaultIdleTimeout       = 30 * time.Second
	defaultWriteTimeout      = 30 * time.Second
	defaultGenerationTimeout = 5 * time.Minute

	defaultMaxConcurrentPerAccount = 4
	defaultMaxInFlight             = 8
	defaultQueueSize               = 32
	defaultQueueTimeout            = 10 * time.Second
	defaultBodyReadTimeout         = 10 * time.Second
	defaultRetention               = 15 * time.Minute
	defaultSSEKeepAlive            = 5 * time.Second
)

// Provision sets defaults, loads the tool catalog and the wires, and opens (or joins) the ledger
// and backend.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.provisioned = time.Now()
	h.inFlight = inflight.New(h.release, h.logger)
	// Settings the operator wrote beat the built-in per-tool values; defaults do not.
	explicit := toolDefaults{maxInputChars: h.MaxInputChars, maxOutputTokens: h.MaxOutputTokens, temperature: h.Temperature}
	h.setDefaults()
	langs := h.Languages
	if len(langs) == 0 {
		langs = catalog.Languages
	}
	var err error
	if h.languages, err = catalog.NewLanguageMatcher(langs); err != nil {
		return fmt.Errorf("textgen: languages: %w", err)
	}
	if h.DefaultLanguage == "" {
		h.DefaultLanguage = "en"
	}
	if _, _, ok := h.languages.Match(h.DefaultLanguage); !ok {
		return fmt.Errorf("textgen: default_language %q is not one of the languages", h.DefaultLanguage)
	}
	if err := h.loadTools(explicit); err != nil {
		return err
	}

	if err := h.Validate(); err != nil {
		return err
	}
	if err := h.loadWires(ctx); err != nil {
		return err
	}

	if err := registerMetrics(ctx.GetMetricsRegistry()); err != nil {
		return fmt.Errorf("textgen: metrics: %w", err)
	}

	// The ledger and the backend are opened by the textgen app's Start, which `caddy validate`
	// never calls. Every hold and idempotency record carries this handler's hold_ttl, so
	// handlers sharing the ledger, and a reload that changes hold_ttl, each get their own.
	app, err := textgenapp.From(ctx)
	if err != nil {
		return fmt.Errorf("textgen: %w", err)
	}
	h.app = app
	if h.ledgerRef, err = app.Ledger(h.Ledger, badgerledger.Options{
		HoldTTL:       time.Duration(h.HoldTTL),
		CacheAccounts: h.LedgerCacheAccounts,
		Logger:        h.logger.Named("ledger"),
	}); err != nil {
		return fmt.Errorf("textgen: %w", err)
	}
	if err := h.setupLimits(h.ledgerRef.Key()); err != nil {
		return fmt.Errorf("textgen: limits: %w", err)
	}
	app.SetToolPrices(h.ledgerRef.Key(), h.toolPrices()) // what My Account says a request costs
	if h.serversRef, err = h.openServers(app, h.wire); err != nil {
		return fmt.Errorf("textgen: %w", err)
	}
	if err := h.openToolBackends(app); err != nil {
		return err
	}
	h.setupContexts() // after the tools' own backends: they have contexts of their own
	if err := h.setupRetention(app); err != nil {
		return fmt.Errorf("textgen: %w", err)
	}
	h.setupReceipts(app) // receipts.go, after the retention's key
	// Every app is provisioned by Start: the servers and logs that route to this handler can
	// be read then (accesslog.go).
	app.OnStart(func() error { h.warnAccessLogsAtStart(ctx); return nil })
	app.OnStart(func() error {
		h.checkModels()
		return nil
	})
	return nil
}

// setDefaults fills in every setting the operator left out (Provision).
func (h *Handler) setDefaults() {
	h.Model = cmp.Or(h.Model, defaultModel)
	h.MaxInputChars = cmp.Or(h.MaxInputChars, defaultMaxInputChars)
	h.MaxBodyBytes = cmp.Or(h.MaxBodyBytes, defaultMaxBodyBytes)
	h.MaxOutputTokens = cmp.Or(h.MaxOutputTokens, defaultMaxOutputTokens)
	h.ConnectTimeout = cmp.Or(h.ConnectTimeout, caddy.Duration(defaultConnectTimeout))
	h.FirstPieceTimeout = cmp.Or(h.FirstPieceTimeout, caddy.Duration(defaultFirstPieceTimeout))
	h.IdleTimeout = cmp.Or(h.IdleTimeout, caddy.Duration(defaultIdleTimeout))
	h.WriteTimeout = cmp.Or(h.WriteTimeout, caddy.Duration(defaultWriteTimeout))
	h.GenerationTimeout = cmp.Or(h.GenerationTimeout, caddy.Duration(defaultGenerationTimeout))
	h.HoldTTL = cmp.Or(h.HoldTTL, h.GenerationTimeout+caddy.Duration(5*time.Minute))
	h.setRateLimitDefaults()
	h.MaxConcurrentPerAccount = cmp.Or(h.MaxConcurrentPerAccount, defaultMaxConcurrentPerAccount)
	h.MaxInFlight = cmp.Or(h.MaxInFlight, defaultMaxInFlight)
	h.QueueSize = cmp.Or(h.QueueSize, defaultQueueSize)
	h.QueueTimeout = cmp.Or(h.QueueTimeout, caddy.Duration(defaultQueueTimeout))
	h.BodyReadTimeout = cmp.Or(h.BodyReadTimeout, caddy.Duration(defaultBodyReadTimeout))
	h.Retention = cmp.Or(h.Retention, caddy.Duration(defaultRetention))
	h.SSEKeepAlive = cmp.Or(h.SSEKeepAlive, caddy.Duration(defaultSSEKeepAlive))
	if len(h.WireRaw) == 0 {
		h.WireRaw = json.RawMessage(`{"api":"ollama"}`)
	}
}

// Validate rejects a configuration that cannot work, naming the field.
func (h *Handler) Validate() error {
	if strings.TrimSpace(h.Ledger) == "" {
		return fmt.Errorf("textgen: ledger: a directory or a postgres:// URL for the ledger is required")
	}
	if h.LedgerCacheAccounts < 0 {
		return fmt.Errorf("textgen: ledger_cache_accounts must be a number of accounts, at least 1")
	}
	if h.LedgerCacheAccounts != 0 && textgenapp.IsDatabaseURL(h.Ledger) {
		return fmt.Errorf("textgen: ledger_cache_accounts sizes a Badger ledger's cache; a PostgreSQL ledger keeps none")
	}
	if h.MaxInputChars < 0 || h.MaxBodyBytes < 0 || h.MaxOutputTokens < 0 || h.NumCtx < 0 {
		return fmt.Errorf("textgen: max_input_chars, max_body_bytes, max_output_tokens and num_ctx must not be negative")
	}
	for model, tokens := range h.Contexts {
		if strings.TrimSpace(model) == "" || tokens < 1 {
			return fmt.Errorf("textgen: context %q %d: a model name and its window in tokens, more than 0", model, tokens)
		}
	}
	// A hold that expired while its generation still ran would be voided, and the text it paid
	// for would go out free. (The zero values are Provision's defaults, which satisfy this.)
	if h.HoldTTL != 0 && h.HoldTTL <= h.GenerationTimeout+h.QueueTimeout {
		return fmt.Errorf("textgen: hold_ttl %v must be longer than generation_timeout + queue_timeout (%v), or a hold could expire while its generation runs",
			time.Duration(h.HoldTTL), time.Duration(h.GenerationTimeout+h.QueueTimeout))
	}
	if h.Temperature != nil {
		if err := catalog.CheckTemperature(*h.Temperature); err != nil {
			return fmt.Errorf("textgen: %w", err)
		}
	}
	if len(h.Languages) > 0 {
		if _, err := catalog.NewLanguageMatcher(h.Languages); err != nil {
			return fmt.Errorf("textgen: languages: %w", err)
		}
	}
	if err := h.validateRateLimits(); err != nil {
		return err
	}
	if err := validateCORSOrigins(h.CORSOrigins); err != nil {
		return err
	}
	if h.SlotExpiry != 0 && time.Duration(h.SlotExpiry) < time.Second {
		return fmt.Errorf("textgen: slot_expiry must be at least 1s")
	}
	for name, v := range map[string]int{
		"max_concurrent_per_account": h.MaxConcurrentPerAccount,
		"max_in_flight":              h.MaxInFlight,
		"queue_size":                 h.QueueSize,
	} {
		if v < -1 {
			return fmt.Errorf("textgen: %s: %d is neither a positive number nor -1 (off)", name, v)
		}
	}
	if h.QueueTimeout < 0 || h.BodyReadTimeout < 0 || h.WriteTimeout < 0 {
		return fmt.Errorf("textgen: queue_timeout, body_read_timeout and write_timeout must not be negative")
	}
	for slug, tc := range h.Tools {
		if tc == nil {
			continue
		}
		if tc.Temperature != nil {
			if err := catalog.CheckTemperature(*tc.Temperature); err != nil {
				return fmt.Errorf("textgen: tool %s: %w", slug, err)
			}
		}
		if tc.MaxInputChars < 0 || tc.MaxOutputTokens < 0 {
			return fmt.Errorf("textgen: tool %s: max_input_chars and max_output_tokens must not be negative", slug)
		}
		if tc.Credits < 0 || tc.Credits > ledger.MaxHoldCredits {
			return fmt.Errorf("textgen: tool %s: credits %d is not between 1 and %d", slug, tc.Credits, ledger.MaxHoldCredits)
		}
	}
	return nil
}

// Cleanup releases the shared ledger and backend; the last user closes them. Requests of this
// config that still run (a reload does not wait for them) keep both until they end: then the
// release happens in the background. It is safe after a Provision that failed half way.
func (h *Handler) Cleanup() error {
	return h.inFlight.Cleanup()
}

// release gives back whatever Provision acquired; the Guard calls it once.
func (h *Handler) release() error {
	h.receipts.unregister()
	err := errors.Join(h.ledgerRef.Release(), h.serversRef.Release(), h.releaseToolBackends())
	h.lim.release() // after the backend, whose host counter it holds
	return err
}

// store is the ledger once the app has opened it, else nil.
func (h *Handler) store() handlerLedger {
	s, err := h.ledgerRef.Get()
	if err != nil {
		return nil
	}
	return s
}

// backend is the handler's model servers once the app has opened them, else nil.
func (h *Handler) backend() backends.ModelServers {
	s, err := h.serversRef.Get()
	if err != nil {
		return nil
	}
	return s
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
