package caddymodule

import (
	"context"
	"fmt"
	"hash/maphash"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/backends/modelname"
	"github.com/caddy-textgen/textgen/caddymodule/catalog"
	"github.com/caddy-textgen/textgen/ledger"
)

// A model's context holds the prompt (the chat template, the tool's system prompt, the input)
// and the answer together. A model server given more cuts the prompt without a word (Ollama
// drops the system prompt, then the front of the input) and the answer is to another question.
// So, per model:
//
//   - the window (the most its context can hold) is read from the model server, or the
//     `context` setting;
//   - num_ctx, the context it runs with, is sized once for the tools that use it: the longest
//     system prompt, the longest input the configuration accepts and the tool's answer, capped
//     by the window (an Ollama model reloads whenever num_ctx changes, so one value per model);
//   - every request is checked before the model is called: its prompt counted with a bound that
//     never counts low (a token is at least one byte of text, so the UTF-8 bytes), refined by
//     the prompt sizes the server reported for the same system prompt; what cannot fit with the
//     answer is refused 413 input_too_large, free;
//   - every answer is checked after: a reported prompt shorter than the server has counted for
//     the same system prompt before, a prompt and answer longer than the context, or an answer
//     stopped by the context's end rather than by the tool's max_output_tokens: the server cut
//     something, and the generation is not charged.

// templateAllowance is what a chat template may add to the system prompt and the input in
// tokens: role markers, the BOS token, a date line (llama3's template adds about 40).
const templateAllowance = 128

// numCtxStep rounds num_ctx up, so that small changes of a setting do not each reload a model.
const numCtxStep = 512

// modelContexts are the contexts of the models a handler uses.
type modelContexts struct {
	mu     sync.Mutex
	byName map[string]*modelContext // by contextKey
}

// contextKey names a model on a set of model servers: the handler's, or a tool's own.
func contextKey(rt *toolRuntime) string {
	if rt.backendRef != nil {
		return rt.Slug + "\x00" + modelname.Normalize(rt.model)
	}
	return "\x00" + modelname.Normalize(rt.model)
}

// modelContext is one model's context: its window, the num_ctx it runs with, and what its
// server reported of the prompts it was sent.
type modelContext struct {
	model string
	// setting is the `context` setting for the model (0: none), numCtxSetting num_ctx (0: none).
	setting, numCtxSetting int
	// need is the most tokens any tool of this model may need (its longest system prompt, its
	// max_input_chars at one token a character, its max_output_tokens, the allowance).
	need int
	// window is the window the server reported (0: not known yet). ask is held by the one
	// request that asks the server for it (the others wait for its answer); failed is when the
	// last ask failed (UnixNano), so that a server that is down is not asked by every request.
	window atomic.Int64
	ask    sync.Mutex
	failed atomic.Int64

	// countAsk is held by the one request that asks the server to count a tool's instructions
	// (inputlimit.go).
	countAsk sync.Mutex
	logger   *zap.Logger

	mu sync.Mutex
	// seen is, per system prompt, what the server reported of prompts that were not cut.
	seen map[uint64]promptSeen
	// counts is, per counted system prompt, what the server counted of it (inputlimit.go).
	counts map[uint64]counted
}

// promptSeen bounds the tokens of a system prompt with its template, from the reports of the
// prompts sent with it: at most the fewest prompt tokens reported (upper, the input's tokens
// included), at least the most reported minus the input's bytes (lower).
type promptSeen struct{ upper, lower int }

// cutMargin is the tokens a prompt may count fewer than its system prompt's lower bound without
// being taken for cut: a few tokens that merge across the edge of the template and the input.
// A real cut drops the whole system prompt (hundreds of tokens) or the front of the input.
const cutMargin = 4

// maxSeen bounds the memory of promptSeen per model (every tool × language × tone is 3,240).
const maxSeen = 8192

var seed = maphash.MakeSeed()

// setupContexts sizes the context of every model the tools use (Provision).
func (h *Handler) setupContexts() {
	h.contexts = &modelContexts{byName: make(map[string]*modelContext)}
	windows := make(map[string]int, len(h.Contexts))
	for model, tokens := range h.Contexts {
		windows[modelname.Normalize(model)] = tokens
	}
	for _, slug := range catalog.Default().Slugs() {
		rt := h.tools[slug]
		rt.longestSystem = h.longestSystemOf(rt)
		rt.countedSystem = catalog.BuildSystem(rt.Tool, "en", "English", "")
		key := contextKey(rt)
		mc := h.contexts.byName[key]
		if mc == nil {
			mc = &modelContext{model: rt.model, setting: windows[modelname.Normalize(rt.model)],
				numCtxSetting: h.NumCtx, seen: make(map[uint64]promptSeen), counts: make(map[uint64]counted), logger: h.logger}
			h.contexts.byName[key] = mc
		}
		mc.need = max(mc.need, h.toolNeed(rt))
		rt.context = mc
	}
}

// toolNeed is the most tokens a request of rt may need: its longest system prompt as bytes, its
// longest input at one token a character, its answer and the template's allowance.
func (h *Handler) toolNeed(rt *toolRuntime) int {
	return rt.longestSystem + templateAllowance + rt.maxInputChars + rt.maxOutputTokens
}

// windowOf is the model's window: the `context` setting, else what its server reported. Until
// the server has told it, the request asks it (the first request of a model that appeared after
// the start, or one that comes before the start-up check has asked), waiting at most
// windowAskTimeout: a num_ctx sized without the window could accept an input the model cannot
// hold. 0: not known (no server to ask, or it did not answer within the last windowAskTimeout).
func (mc *modelContext) windowOf(ctx context.Context, wf backends.WindowFinder) int {
	if mc.setting > 0 {
		return mc.setting
	}
	if w := mc.window.Load(); w > 0 {
		return int(w)
	}
	if wf == nil || time.Since(time.Unix(0, mc.failed.Load())) < windowAskTimeout {
		return 0
	}
	mc.ask.Lock()
	defer mc.ask.Unlock()
	if w := mc.window.Load(); w > 0 { // another request asked meanwhile
		return int(w)
	}
	ctx, cancel := context.WithTimeout(ctx, windowAskTimeout)
	defer cancel()
	w, err := wf.ContextWindow(ctx, mc.model)
	if err != nil {
		mc.failed.Store(time.Now().UnixNano())
		return 0
	}
	mc.window.Store(int64(w))
	return w
}

// windowAskTimeout bounds a request's wait for its model's window, and how long a failed ask is
// not repeated.
const windowAskTimeout = 5 * time.Second

// numCtx is the context the model runs with: num_ctx when set, else what its tools need,
// rounded up, and at most its window.
func (mc *modelContext) numCtx(window int) int {
	if mc.numCtxSetting > 0 {
		return mc.numCtxSetting
	}
	n := (mc.need + numCtxStep - 1) / numCtxStep * numCtxStep
	if window > 0 && n > window {
		n = window
	}
	return n
}

// fixedBound is at most how many tokens the template and system take: the bytes of system and
// the template's allowance, or less where the server counted the tool's instructions (lim) or
// reported a smaller prompt with system (key is system's hash).
func (mc *modelContext) fixedBound(system string, key uint64, lim inputLimit) int {
	bound := len(system) + templateAllowance
	if lim.counted {
		bound = min(bound, lim.fixed)
	}
	mc.mu.Lock()
	seen, ok := mc.seen[key]
	mc.mu.Unlock()
	if ok && seen.upper+2 < bound {
		bound = seen.upper + 2 // two tokens for a merge across the input's edge
	}
	return bound
}

// contextFit is one request's prompt against its model's context.
type contextFit struct {
	numCtx int // the context the model runs with
	fixed  int // at most the tokens of the template and the system prompt
	input  int // at most the tokens of the input (its bytes)
	output int // the tool's answer, max_output_tokens
	// system is the hash of the system prompt, under which the server's reports are noted.
	system uint64
}

func (f contextFit) fits() bool { return f.fixed+f.input+f.output <= f.numCtx }

// prompt is the request's system prompt (the tool's, in the request's language and tone) and its
// fit in its model's context, as fitContext found them.
type prompt struct {
	system string
	fit    contextFit
}

// fitContext checks the input of a against the tool's limit (inputlimit.go) and the request's
// prompt and answer against its model's context on backend, before anything is held or sent:
// else 413 input_too_large, free. It builds the system prompt.
func (h *Handler) fitContext(ctx context.Context, a *ask, backend backends.ModelServers) (p prompt, e *apiError) {
	p.system = catalog.BuildSystem(a.tool.Tool, a.lang, a.req.Language, a.req.Tone)
	lim := h.inputLimit(ctx, a.tool, backend, false)
	n := utf8.RuneCountInString(a.req.Input)
	if n > lim.chars && n <= lim.capped && !lim.counted {
		// Refused on the instructions' bytes only: count them before refusing.
		lim = h.inputLimit(ctx, a.tool, backend, true)
	}
	if n > lim.chars {
		if lim.lowered {
			metrics.contextRefusals.WithLabelValues(a.tool.Slug, "checked").Inc()
		}
		return p, lim.tooManyChars(a.tool.Slug, n)
	}
	mc := a.tool.context
	if mc == nil {
		return p, nil // not sized (a bug): the server's own answer is the check
	}
	key := maphash.String(seed, p.system)
	p.fit = contextFit{numCtx: lim.numCtx, fixed: mc.fixedBound(p.system, key, lim),
		input: len(a.req.Input), output: a.tool.maxOutputTokens, system: key}
	if !p.fit.fits() && !lim.counted {
		// Text of other scripts: more bytes than characters. Count the instructions before
		// refusing on their bytes.
		lim = h.inputLimit(ctx, a.tool, backend, true)
		p.fit.fixed = mc.fixedBound(p.system, key, lim)
	}
	if p.fit.fits() {
		return p, nil
	}
	metrics.contextRefusals.WithLabelValues(a.tool.Slug, "checked").Inc()
	room := max(p.fit.numCtx-p.fit.fixed-p.fit.output, 0)
	return p, newError(http.StatusRequestEntityTooLarge, "input_too_large", "input", fmt.Sprintf(
		"input is too long for the model of the tool %s: its %d characters take %d bytes of UTF-8, counted at up to a token a byte, "+
			"and with the tool's instructions (up to %d tokens) and its answer (up to %d tokens) the model's context of %d tokens "+
			"has room for %d; shorten it to at most %d bytes (the tool accepts at most %d characters of plain ASCII text, fewer of other scripts); no credit was charged",
		a.tool.Slug, utf8.RuneCountInString(a.req.Input), p.fit.input, p.fit.fixed, p.fit.output, p.fit.numCtx, room, room, lim.chars))
}

// contextCut checks a complete generation's figures against what was sent: a non-nil error
// (KindTooLong) when the model server cut the prompt or ran out of context; else it learns
// from the figures.
func (g *generation) contextCut(st backends.Stats) error {
	mc := g.ask.tool.context
	if mc == nil || g.caller.key.Mode != ledger.Live {
		return nil
	}
	key := g.prompt.fit.system
	prompt, inBytes := st.PromptTokens, len(g.ask.req.Input)
	why := ""
	mc.mu.Lock()
	seen, known := mc.seen[key]
	switch {
	case st.DoneReason == "length" && st.OutputTokens < g.maxOutputTokens():
		why = fmt.Sprintf("the model reached the end of its context after %d tokens of its answer (it may have %d)", st.OutputTokens, g.maxOutputTokens())
	case prompt <= 0:
		// the server did not report the prompt: nothing to check or learn
	case prompt+st.OutputTokens > g.prompt.fit.numCtx:
		why = fmt.Sprintf("the prompt (%d tokens) and the answer (%d) took more than the context of %d tokens", prompt, st.OutputTokens, g.prompt.fit.numCtx)
	case known && prompt < seen.lower-cutMargin:
		why = fmt.Sprintf("the model server read %d tokens of a prompt that has at least %d", prompt, seen.lower)
	default:
		if !known && len(mc.seen) >= maxSeen {
			clear(mc.seen)
		}
		lower := prompt - inBytes
		if known {
			lower = max(lower, seen.lower)
			prompt = min(prompt, seen.upper)
		}
		mc.seen[key] = promptSeen{upper: prompt, lower: lower}
	}
	mc.mu.Unlock()
	if why == "" {
		return nil
	}
	metrics.contextRefusals.WithLabelValues(g.ask.tool.Slug, "cut").Inc()
	g.h.logger.Warn("the model server cut the prompt or ran out of context; the generation is not charged",
		zap.String("request_id", g.id), zap.String("tool", g.ask.tool.Slug), zap.String("model", g.ask.tool.model),
		zap.Int("prompt_tokens", st.PromptTokens), zap.Int("output_tokens", st.OutputTokens),
		zap.String("done_reason", st.DoneReason), zap.Int("num_ctx", g.prompt.fit.numCtx), zap.String("why", why))
	return &backends.Error{Kind: backends.KindTooLong, Host: st.Host, Pieces: st.Pieces, Err: fmt.Errorf("context: %s", why)}
}

// reportContexts asks the model servers for the windows of the models the tools use (and, where
// the instructions' bytes leave no room for max_input_chars, for the tokens of the
// instructions), and logs once, as a warning, the tools whose input limit the context lowers
// below max_input_chars, with each limit (Provision's start-up check; it blocks, so it runs in
// the background).
func (h *Handler) reportContexts(ctx context.Context, s backends.ModelServers, keys []string) {
	for _, key := range keys {
		mc := h.contexts.byName[key]
		if mc == nil {
			continue
		}
		if mc.setting == 0 {
			w, err := s.ContextWindow(ctx, mc.model)
			if err != nil {
				h.logger.Warn("the model server does not tell the model's context window; set `context <model> <tokens>` so that "+
					"inputs that cannot fit are refused rather than cut by the server",
					zap.String("model", mc.model), zap.Error(err))
				continue
			}
			mc.window.Store(int64(w))
		}
		window := mc.windowOf(ctx, nil)
		numCtx := mc.numCtx(window)
		var lowered []string
		for _, slug := range catalog.Default().Slugs() {
			rt := h.tools[slug]
			if contextKey(rt) != key {
				continue
			}
			if lim := h.inputLimit(ctx, rt, s, false); lim.lowered {
				lowered = append(lowered, lim.description(slug))
			}
		}
		sort.Strings(lowered)
		fields := []zap.Field{zap.String("model", mc.model), zap.Int("window", window), zap.Int("num_ctx", numCtx)}
		if len(lowered) == 0 {
			h.logger.Info("model context sized for every tool's longest input", fields...)
			continue
		}
		remedy := "lower max_input_chars or the tool's max_output_tokens, or use a model with a larger window"
		if mc.numCtxSetting > 0 && (window == 0 || mc.numCtxSetting < window) {
			remedy = "raise num_ctx (up to the model's window), " + remedy
		}
		h.logger.Warn("the model's context holds less than max_input_chars for some tools: their inputs are limited to what it holds "+
			"(GET /api/v1/tools and every 413 input_too_large state each tool's limit); to accept longer inputs, "+remedy,
			append(fields, zap.Strings("tools", lowered))...)
	}
}
