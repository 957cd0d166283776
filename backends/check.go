package backends

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ollama/ollama/api"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/backends/modelname"
)

// pullLogInterval throttles pull progress in the log; a variable so tests can shorten it.
var pullLogInterval = 5 * time.Second

// CheckModels is the start-up check: it asks every host for its version and its models, and
// logs which host does not answer and which model is missing where, with the command that
// fixes it. With pull it pulls each missing model instead, logging the progress. It returns
// nil when every host answers and has every model, else an error listing what is wrong;
// whether that stops the start-up is the caller's choice (a host may come up later).
func (c *Chat) CheckModels(ctx context.Context, models []string, pull bool) error {
	if c.cfg.API == APIOpenAI {
		return c.checkOpenAIModels(ctx, models)
	}
	var errs []error
	for _, h := range c.hosts {
		version, err := h.api.Version(ctx)
		if err != nil {
			if ctx.Err() == nil {
				h.down(c.log, err)
			}
			c.log.Error("ollama host does not answer; start it with `ollama serve` there, or fix the host in the config",
				zap.String("host", h.name), zap.Error(err))
			errs = append(errs, fmt.Errorf("ollama host %s does not answer: %w", h.name, err))
			continue
		}
		h.up(c.log)
		list, err := h.api.List(ctx)
		if err != nil {
			c.log.Error("ollama host cannot list its models", zap.String("host", h.name), zap.Error(err))
			errs = append(errs, fmt.Errorf("ollama host %s: listing models: %w", h.name, err))
			continue
		}
		have := make(map[string]bool, 2*len(list.Models))
		for _, m := range list.Models {
			have[NormalizeModel(m.Name)] = true
			have[NormalizeModel(m.Model)] = true
		}
		missing := missingModels(models, have)
		c.log.Info("ollama host answers",
			zap.String("host", h.name), zap.String("version", version),
			zap.Int("models", len(list.Models)), zap.Strings("missing", missing))

		for _, m := range missing {
			command := pullCommand(h, m)
			if !pull {
				c.log.Error("model missing on ollama host; pull it with the command given, or enable pulling in the config",
					zap.String("host", h.name), zap.String("model", m), zap.String("command", command))
				errs = append(errs, fmt.Errorf("model %q is missing on ollama host %s (run: %s)", m, h.name, command))
				continue
			}
			c.log.Info("pulling missing model", zap.String("host", h.name), zap.String("model", m))
			if err := c.pull(ctx, h, m); err != nil {
				c.log.Error("pulling model failed; pull it by hand with the command given",
					zap.String("host", h.name), zap.String("model", m), zap.String("command", command), zap.Error(err))
				errs = append(errs, fmt.Errorf("pulling model %q on ollama host %s: %w", m, h.name, err))
				continue
			}
			c.log.Info("pulled model", zap.String("host", h.name), zap.String("model", m))
		}
	}
	return errors.Join(errs...)
}

func (c *Chat) pull(ctx context.Context, h *chatHost, model string) error {
	var (
		lastStatus string
		lastLog    time.Time
	)
	err := h.api.Pull(ctx, &api.PullRequest{Model: model}, func(p api.ProgressResponse) error {
		now := time.Now()
		if p.Status == lastStatus && now.Sub(lastLog) < pullLogInterval {
			return nil
		}
		lastStatus, lastLog = p.Status, now
		fields := []zap.Field{zap.String("host", h.name), zap.String("model", model), zap.String("status", p.Status)}
		if p.Total > 0 {
			fields = append(fields,
				zap.String("progress", fmt.Sprintf("%.1f%%", 100*float64(p.Completed)/float64(p.Total))),
				zap.Int64("completed_bytes", p.Completed), zap.Int64("total_bytes", p.Total))
		}
		c.log.Info("pulling model", fields...)
		return nil
	})
	// The api client reports a stream cut short as success; Ollama's last line is "success".
	if err == nil && lastStatus != "success" {
		err = fmt.Errorf("pull ended without success (last status %q)", lastStatus)
	}
	return err
}

// pullCommand is the shell command an operator runs to get model onto h.
func pullCommand(h *chatHost, model string) string {
	if h.name == DefaultOllamaHost {
		return "ollama pull " + model
	}
	return "OLLAMA_HOST=" + h.name + " ollama pull " + model
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

// checkOpenAIModels is CheckModels for OpenAI-compatible hosts: GET /v1/models on each, every
// model looked for among the ids. Such hosts cannot pull models: a missing one is reported.
func (c *Chat) checkOpenAIModels(ctx context.Context, models []string) error {
	var errs []error
	for _, h := range c.hosts {
		ids, err := c.openaiModels(ctx, h)
		if err != nil {
			if ctx.Err() == nil {
				h.down(c.log, err)
			}
			c.log.Error("model server does not answer its model list; check the host and the api_key in the config",
				zap.String("host", h.name), zap.Error(err))
			errs = append(errs, fmt.Errorf("openai host %s: %w", h.name, err))
			continue
		}
		h.up(c.log)
		have := make(map[string]bool, len(ids))
		for _, id := range ids {
			have[NormalizeModel(id)] = true
		}
		missing := missingModels(models, have)
		c.log.Info("model server answers", zap.String("host", h.name), zap.Int("models", len(ids)), zap.Strings("missing", missing))
		for _, m := range missing {
			c.log.Error("model missing on the model server; serve it there (models cannot be pulled through the OpenAI API)",
				zap.String("host", h.name), zap.String("model", m))
			errs = append(errs, fmt.Errorf("model %q is not served by openai host %s", m, h.name))
		}
	}
	return errors.Join(errs...)
}

// NormalizeModel gives every spelling of one model the same key (modelname.Normalize).
func NormalizeModel(name string) string { return modelname.Normalize(name) }
