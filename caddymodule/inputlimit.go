package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/catalog"
)

// A tool's input limit is one number, stated the same way everywhere (GET /api/v1/tools, every
// 413 input_too_large, the start-up log): the smaller of the tool's max_input_chars and what its
// model's context holds beside the tool's instructions and its answer. The input is counted at
// one token a byte of UTF-8 (no tokenizer counts more), so the limit is in characters of plain
// ASCII text; other scripts take more bytes a character and are checked in bytes (fitContext).
//
// The instructions are counted at their bytes too while that leaves room for max_input_chars
// (large windows: nothing to ask). Where it does not, their bytes would leave a small window no
// room at all (a 1,600-byte system prompt in a 2,048-token window), so the model server is asked
// how many tokens they really take, once per model and tool (backends.CountSystem); where it
// cannot tell, the input alone is checked against the context, and the check after the answer
// (contextCut) still catches a prompt the server cut, free.

// countMargin is what a tool's instructions in another language or tone may count beyond the
// counted English ones and the bytes they add: a token where each inserted name meets the text
// around it.
const countMargin = 16

// countRetry is how long a failed count is not asked again: meanwhile the input alone is checked.
const countRetry = time.Minute

// countAskTimeout bounds the wait for a count: an Ollama server may load the model first.
const countAskTimeout = 30 * time.Second

// counted is what the model server said of one tool's instructions.
type counted struct {
	fixed  int   // at most the tokens of the tool's longest instructions with their template; 0: none
	failed int64 // when the last ask failed (UnixNano); 0: it did not
}

// inputLimit is a tool's longest input, with the figures behind it.
type inputLimit struct {
	chars   int  // the longest input in characters (of plain ASCII text: one token a byte)
	capped  int  // the tool's max_input_chars
	lowered bool // chars < capped: the model's context holds no more
	numCtx  int  // the context the model runs with (0: not sized)
	output  int  // the tool's answer, max_output_tokens
	// fixed is at most the tokens of the tool's longest instructions with their template: their
	// bytes and the template's allowance (countedNo: the server was not asked, the bytes leave
	// room for max_input_chars), or what the server counted; 0: the server could not count, the
	// input alone is checked.
	fixed   int
	counted bool // fixed is the server's count (or 0 for none), not the bytes
}

// servers is the model servers rt's requests go to (nil: not open yet).
func (h *Handler) servers(rt *toolRuntime) backends.ModelServers {
	if s, has := rt.ownBackend(); has {
		if s == nil {
			return nil
		}
		return s
	}
	return h.backend()
}

// inputLimit is rt's input limit. It may ask the model servers s for the model's window
// (windowOf) and, when count is set or the instructions' bytes take more of the context than
// they leave for the input (a small window), for the tokens of the instructions (countFixed).
func (h *Handler) inputLimit(ctx context.Context, rt *toolRuntime, s backends.ModelServers, count bool) inputLimit {
	lim := inputLimit{chars: rt.maxInputChars, capped: rt.maxInputChars, output: rt.maxOutputTokens}
	mc := rt.context
	if mc == nil {
		return lim
	}
	var wf backends.WindowFinder
	if s != nil {
		wf = s
	}
	lim.numCtx = mc.numCtx(mc.windowOf(ctx, wf))
	lim.fixed = rt.longestSystem + templateAllowance
	room := lim.numCtx - lim.fixed - lim.output
	if !count && room >= lim.capped {
		return lim
	}
	if !count && room >= lim.fixed {
		// The instructions' bytes leave more room than they take: the byte bound stands (or a
		// count made before), and the server is asked only before an input is refused
		// (fitContext), so that a start or the catalog does not run every tool's instructions
		// through the model.
		if c, ok := mc.countOf(maphash.String(seed, rt.countedSystem)); ok {
			lim.fixed, lim.counted = min(lim.fixed, c), true
			room = lim.numCtx - lim.fixed - lim.output
		}
		lim.chars = min(lim.capped, max(room, 0))
		lim.lowered = lim.chars < lim.capped
		return lim
	}
	lim.fixed, lim.counted = min(lim.fixed, mc.countFixed(ctx, rt, s, lim.numCtx)), true
	lim.chars = min(lim.capped, max(lim.numCtx-lim.fixed-lim.output, 0))
	lim.lowered = lim.chars < lim.capped
	return lim
}

// countFixed is at most how many tokens rt's instructions take with their template in any
// language and tone, from the server's count of the English ones without a tone (cached per
// model and system prompt): the count (the template's allowance added where the server counted
// the text alone), the bytes a longer language name or a tone adds, and countMargin. 0: the
// server cannot count (or did not, within the last countRetry).
func (mc *modelContext) countFixed(ctx context.Context, rt *toolRuntime, sc backends.SystemCounter, numCtx int) int {
	key := maphash.String(seed, rt.countedSystem)
	if c, ok := mc.countOf(key); ok {
		return c
	}
	if sc == nil {
		return 0
	}
	mc.countAsk.Lock()
	defer mc.countAsk.Unlock()
	if c, ok := mc.countOf(key); ok { // another request asked meanwhile
		return c
	}
	ctx, cancel := context.WithTimeout(ctx, countAskTimeout)
	defer cancel()
	pc, err := sc.CountSystem(ctx, rt.model, rt.countedSystem, numCtx)
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if err != nil {
		mc.counts[key] = counted{failed: time.Now().UnixNano()}
		if !errors.Is(err, backends.ErrCountUnknown) && mc.logger != nil {
			mc.logger.Warn("could not ask the model server how many tokens a tool's instructions take; "+
				"until it answers, inputs are checked against the model's context on their own",
				zap.String("tool", rt.Slug), zap.String("model", rt.model), zap.Error(err))
		}
		return 0
	}
	fixed := pc.Tokens + 2 // a token that merges across the edge of the instructions and the input
	if !pc.Templated {
		fixed = pc.Tokens + templateAllowance
	}
	fixed += max(rt.longestSystem-len(rt.countedSystem), 0) + countMargin
	mc.counts[key] = counted{fixed: fixed}
	return fixed
}

// countOf is the count noted under key; ok false: the server is to be asked.
func (mc *modelContext) countOf(key uint64) (fixed int, ok bool) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	c, known := mc.counts[key]
	switch {
	case !known:
		return 0, false
	case c.failed != 0:
		return 0, time.Since(time.Unix(0, c.failed)) < countRetry
	}
	return c.fixed, true
}

// tooManyChars is the 413 of an input over the tool's limit.
func (lim inputLimit) tooManyChars(slug string, n int) *apiError {
	msg := fmt.Sprintf("input has %d characters; the tool %s accepts at most %d", n, slug, lim.chars)
	if lim.lowered {
		msg += lim.why()
	}
	return newError(http.StatusRequestEntityTooLarge, "input_too_large", "input", msg+"; no credit was charged")
}

// why says why the limit is below max_input_chars.
func (lim inputLimit) why() string {
	instructions := fmt.Sprintf("the tool's instructions (up to %d tokens)", lim.fixed)
	if lim.counted && lim.fixed == 0 {
		instructions = "the tool's instructions"
	}
	return fmt.Sprintf(" (its model's context of %d tokens holds %s, its answer (up to %d tokens) and, at one token a byte, %d bytes of input)",
		lim.numCtx, instructions, lim.output, lim.chars)
}

// description is the limit as the start-up log states it for a tool it lowers.
func (lim inputLimit) description(slug string) string {
	fixed := fmt.Sprintf("instructions up to %d tokens", lim.fixed)
	if lim.fixed == 0 {
		fixed = "instructions not counted: the model server cannot count them"
	}
	return fmt.Sprintf("%s: %d characters (max_input_chars %d; %s, answer %d)", slug, lim.chars, lim.capped, fixed, lim.output)
}

// toolLimits are the input limits of the tools, in the catalog's order (GET /api/v1/tools).
func (h *Handler) toolLimits(ctx context.Context) map[string]int {
	out := make(map[string]int, len(h.tools))
	for _, slug := range catalog.Default().Slugs() {
		rt := h.tools[slug]
		lim := h.inputLimit(ctx, rt, h.servers(rt), false)
		if lim.lowered && !lim.counted {
			// The catalog states the limit a refusal would: counted (once per model and tool).
			lim = h.inputLimit(ctx, rt, h.servers(rt), true)
		}
		out[slug] = lim.chars
	}
	return out
}

// longestSystemOf is the length in bytes of rt's longest system prompt (over the languages and
// tones a request may name).
func (h *Handler) longestSystemOf(rt *toolRuntime) int {
	longestTag, longestName := 0, 0
	for _, l := range h.languages.Languages() {
		longestTag, longestName = max(longestTag, len(l.Tag)), max(longestName, len(l.Name))
	}
	n := 0
	for _, tone := range append([]string{""}, catalog.Tones...) {
		n = max(n, len(catalog.BuildSystem(rt.Tool, strings.Repeat("x", longestTag), strings.Repeat("x", longestName), tone)))
	}
	return n
}
