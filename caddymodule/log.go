package caddymodule

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// log writes the one structured line of a generate request. It never holds the key, the
// input or the output.
func (g *generation) log() {
	if g.logged {
		return
	}
	g.logged = true
	ce := g.h.logger.Check(zapcore.InfoLevel, "generate")
	if ce == nil {
		return
	}
	fields := []zap.Field{
		zap.String("request_id", g.id),
		zap.Int("status", g.status),
		zap.Int64("credits", g.credit),
		zap.Duration("duration", now().Sub(g.start)),
	}
	if g.caller.acct.ID != "" {
		fields = append(fields, zap.String("account_id", g.caller.acct.ID), zap.String("key_id", g.caller.key.ID),
			zap.String("key", g.caller.key.Prefix+"..."+g.caller.key.Last4), zap.String("mode", string(g.caller.key.Mode)))
	}
	if g.ask.tool != nil {
		fields = append(fields, zap.String("tool", g.ask.tool.Slug), zap.String("language", g.ask.lang))
	}
	if g.ask.chat != nil {
		fields = append(fields, zap.String("api", "chat_completions"))
	}
	if g.stats.Pieces > 0 || g.stats.OutputTokens > 0 {
		fields = append(fields, zap.Duration("time_to_first", g.stats.TimeToFirst),
			zap.Int("output_tokens", g.stats.OutputTokens), zap.Int("prompt_tokens", g.stats.PromptTokens))
	}
	if g.queued > 0 {
		fields = append(fields, zap.Duration("queue_wait", g.queued))
	}
	if g.errKind != "" {
		fields = append(fields, zap.String("error", g.errKind))
	}
	ce.Write(fields...)
}
