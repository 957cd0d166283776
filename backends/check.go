package backends

import (
	"context"
	"errors"

	"github.com/caddy-textgen/textgen/backends/modelname"
)

// CheckModels is the start-up check (Wire.CheckModels on each host): it asks every host for its
// models (and, on Ollama's wire, its version), marks a host that does not answer down and one
// that does up, and logs which host does not answer and which model is missing where, with the
// command that fixes it. With pull it pulls each missing model instead (Ollama's wire only; an
// OpenAI-compatible server cannot be asked to), logging the progress. It returns
// nil when every host answers and has every model, else an error listing what is wrong;
// whether that stops the start-up is the caller's choice (a host may come up later).
func (c *Chat) CheckModels(ctx context.Context, models []string, pull bool) error {
	var errs []error
	for _, h := range c.hosts {
		err := c.wire.CheckModels(ctx, c.host(h), models, pull)
		var silent *NoAnswerError
		switch {
		case !errors.As(err, &silent):
			h.up(c.log)
		case ctx.Err() == nil: // else the check was cut short: no verdict on the host
			h.down(c.log, silent.Err)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// missingModels lists the models (each once, in order) that have lacks; have is keyed by
// NormalizeModel.
func missingModels(models []string, have map[string]bool) []string {
	var missing []string
	seen := make(map[string]bool, len(models))
	for _, m := range models {
		n := NormalizeModel(m)
		if m == "" || seen[n] || have[n] {
			continue
		}
		seen[n] = true
		missing = append(missing, m)
	}
	return missing
}

// NormalizeModel gives every spelling of one model the same key (modelname.Normalize).
func NormalizeModel(name string) string { return modelname.Normalize(name) }
