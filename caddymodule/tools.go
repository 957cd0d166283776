package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/catalog"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
)

// toolRuntime is a tool with every default resolved.
type toolRuntime struct {
	*catalog.Tool
	model           string
	maxInputChars   int
	maxOutputTokens int
	temperature     *float64
	// price is what one request of the tool holds and a complete answer charges (credits).
	price int64
	// backendRef is the tool's own model servers (tool { ollama|openai ... }); nil: the
	// handler's.
	backendRef *textgenapp.ServersRef
	// context is the context of the tool's model (context.go), set when the handler is
	// provisioned.
	context *modelContext
	// longestSystem is the length in bytes of the tool's longest system prompt (over the
	// languages and tones), countedSystem the one whose tokens the model server is asked for
	// (inputlimit.go): both set with context.
	longestSystem int
	countedSystem string
}

// toolDefaults are the handler-wide tool settings the operator set explicitly (zero: not set).
type toolDefaults struct {
	maxInputChars, maxOutputTokens int
	temperature                    *float64
}

// loadTools resolves every tool's settings. Precedence, highest first: the tool's own block in
// the config, the handler-wide setting in the config, the built-in value of the tool, the
// handler default.
func (h *Handler) loadTools(explicit toolDefaults) error {
	cat := catalog.Default()
	for slug, tc := range h.Tools {
		if _, ok := cat.Lookup(slug); !ok {
			return fmt.Errorf("textgen: tools: %q is not one of the %d tools", slug, len(cat.Slugs()))
		}
		if tc == nil || tc.PromptFile == "" {
			continue
		}
		data, err := os.ReadFile(tc.PromptFile)
		if err != nil {
			return fmt.Errorf("textgen: tool %s: prompt_file: %w", slug, err)
		}
		pf, err := catalog.ParsePromptFile(data)
		if err != nil {
			return fmt.Errorf("textgen: tool %s: prompt_file %s: %w", slug, tc.PromptFile, err)
		}
		cat, err = cat.With(slug, pf.Override())
		if err != nil {
			return fmt.Errorf("textgen: tool %s: %w", slug, err)
		}
	}
	h.tools = make(map[string]*toolRuntime, len(cat.Slugs()))
	for _, t := range cat.Tools() {
		rt := &toolRuntime{
			Tool:            t,
			model:           h.Model,
			maxInputChars:   firstPositive(explicit.maxInputChars, t.MaxInputChars, h.MaxInputChars),
			maxOutputTokens: firstPositive(explicit.maxOutputTokens, t.MaxOutputTokens, h.MaxOutputTokens),
			temperature:     t.Temperature,
			price:           1,
		}
		if explicit.temperature != nil {
			rt.temperature = explicit.temperature
		}
		if tc := h.Tools[t.Slug]; tc != nil {
			if tc.Model != "" {
				rt.model = tc.Model
			}
			rt.maxInputChars = firstPositive(tc.MaxInputChars, rt.maxInputChars)
			rt.maxOutputTokens = firstPositive(tc.MaxOutputTokens, rt.maxOutputTokens)
			if tc.Temperature != nil {
				rt.temperature = tc.Temperature
			}
			if tc.Credits > 0 {
				rt.price = tc.Credits
			}
		}
		h.tools[t.Slug] = rt
	}
	h.catalog = cat
	return nil
}

// toolPrices are the tools' prices by slug.
func (h *Handler) toolPrices() map[string]int64 {
	out := make(map[string]int64, len(h.tools))
	for slug, rt := range h.tools {
		out[slug] = rt.price
	}
	return out
}

func firstPositive(v ...int) int {
	for _, x := range v {
		if x > 0 {
			return x
		}
	}
	return 0
}

// models lists the distinct models the configuration uses.
func (h *Handler) models() []string {
	seen := map[string]bool{}
	var out []string
	for _, slug := range catalog.Default().Slugs() {
		if h.tools[slug].backendRef != nil {
			continue // checked on the tool's own backend
		}
		if m := h.tools[slug].model; !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

// checkModels checks in the background that every configured model is on the model servers,
// logging what is missing and how to get it (or pulling it where the wire's pull_models is set). It never
// blocks the start of the server: the model server may come up after Caddy.
func (h *Handler) checkModels() {
	if s := h.backend(); s != nil {
		var keys []string
		for _, slug := range catalog.Default().Slugs() {
			if rt := h.tools[slug]; rt.backendRef == nil && !slices.Contains(keys, contextKey(rt)) {
				keys = append(keys, contextKey(rt))
			}
		}
		h.checkModelsOn(s, pulls(h.wire), h.models(), keys)
	}
	for slug, rt := range h.tools {
		if s, _ := rt.ownBackend(); s != nil {
			h.checkModelsOn(s, pulls(h.Tools[slug].wire), []string{rt.model}, []string{contextKey(rt)})
		}
	}
}

// checkModelsOn checks models on servers (pulling the missing ones with pull), then reads their
// windows and reports the tools whose longest input does not fit (context.go); contexts are the
// context keys of those models.
func (h *Handler) checkModelsOn(servers backends.ModelServers, pull bool, models, contexts []string) {
	logger := h.logger
	go func() {
		timeout := 30 * time.Second
		if pull {
			timeout = 2 * time.Hour
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := servers.CheckModels(ctx, models, pull); err != nil {
			logger.Warn("model check", zap.Error(err))
		}
		// The windows and the counts of the instructions get their own time: on a busy CPU
		// server each count reads a tool's instructions through the model.
		rctx, rcancel := context.WithTimeout(context.Background(), reportTimeout)
		defer rcancel()
		h.reportContexts(rctx, servers, contexts)
	}()
}

// reportTimeout bounds the start-up report of the models' contexts (reportContexts).
const reportTimeout = 10 * time.Minute

// serveTools answers GET /api/v1/tools with the catalog (free, no key needed). Each tool's
// max_input_chars is its input limit (inputlimit.go), which the model's context may lower: the
// document is built for each request, from what the model servers have told (asking them what
// they have not yet).
func (h *Handler) serveTools(w http.ResponseWriter, r *http.Request, reqID string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		serveStatic(w, r, reqID, nil) // 405
		return
	}
	doc, err := h.buildToolsJSON(h.toolLimits(r.Context()))
	if err != nil {
		writeError(w, reqID, errInternal, -1)
		return
	}
	serveStatic(w, r, reqID, doc)
}

// serveStatic answers a GET or HEAD of a public JSON document that changes only with the
// configuration (cacheable for 5 minutes); other methods get 405.
func serveStatic(w http.ResponseWriter, r *http.Request, reqID string, body []byte) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, reqID, errMethodNotAllowedGET, -1)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "public, max-age=300")
	hdr.Set("X-Request-Id", reqID)
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

type toolInfo struct {
	Slug          string `json:"slug"`
	Name          string `json:"name"`
	Description   string `json:"description"`
	MaxInputChars int    `json:"max_input_chars"`
	Credits       int64  `json:"credits"`
}

type languageInfo struct {
	Tag  string `json:"tag"`
	Name string `json:"name"`
}

type toolsDoc struct {
	Tools     []toolInfo     `json:"tools"`
	Tones     []string       `json:"tones"`
	Languages []languageInfo `json:"languages"`
	// CreditsPerCall is the price of a tool whose configuration names none; each tool's own
	// is its Credits.
	CreditsPerCall int `json:"credits_per_request"`
}

// buildToolsJSON is the catalog document, with each tool's input limit from limits.
func (h *Handler) buildToolsJSON(limits map[string]int) ([]byte, error) {
	doc := toolsDoc{Tones: catalog.Tones, CreditsPerCall: 1}
	for _, slug := range h.catalog.Slugs() {
		t := h.tools[slug]
		doc.Tools = append(doc.Tools, toolInfo{Slug: slug, Name: t.Name, Description: t.Description, MaxInputChars: limits[slug], Credits: t.price})
	}
	for _, l := range h.languages.Languages() {
		doc.Languages = append(doc.Languages, languageInfo{Tag: l.Tag, Name: l.Name})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	return append(b, '\n'), err
}
