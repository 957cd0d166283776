package backends

import (
	"context"
	"errors"
	"fmt"
)

// A prompt is counted at one token a byte of text until the model server says better (no
// tokenizer makes more tokens than bytes). For a tool's instructions, about 1,600 bytes, that
// bound is far above what the model really reads, and a model with a small window would have no
// room left for any input. So the caller asks the model server how many tokens the instructions
// take, once per model and system prompt, before it refuses an input on their bytes.

// ErrCountUnknown: the model server has no way to count a prompt's tokens.
var ErrCountUnknown = errors.New("the model server does not count a prompt's tokens")

// PromptCount is what a model server counted of a system prompt.
type PromptCount struct {
	// Tokens is the system prompt's tokens.
	Tokens int
	// Templated: Tokens include the model's chat template around the system prompt and an
	// empty input (role markers, BOS), as a generation would send them; else it is the system
	// prompt's text alone and the caller allows for the template.
	Templated bool
}

// CountSystem asks the model servers how many tokens model makes of the system prompt system,
// without generating an answer worth the name (Ollama: a chat with an empty input and one token
// of answer, which reads prompt_eval_count; OpenAI-compatible servers: /tokenize, which
// llama.cpp's server and vLLM have). numCtx is the context the model runs with (Ollama runs the
// count with it, so that the model is not reloaded; 0: the server's default). With several
// hosts it is the largest count any host gives, as a request may go to any of them; a host that
// does not answer is passed over. ErrCountUnknown (wrapped): no host can count.
func (c *Chat) CountSystem(ctx context.Context, model, system string, numCtx int) (PromptCount, error) {
	var (
		best PromptCount
		errs []error
	)
	for _, h := range c.hosts {
		n, err := c.wire.Count(ctx, c.host(h), model, system, numCtx)
		if err != nil {
			errs = append(errs, fmt.Errorf("host %s: %w", h.name, err))
			continue
		}
		if n.Tokens > best.Tokens {
			best = n
		}
	}
	if best.Tokens == 0 {
		if len(errs) == 0 {
			errs = append(errs, ErrCountUnknown)
		}
		return PromptCount{}, errors.Join(errs...)
	}
	return best, nil
}
