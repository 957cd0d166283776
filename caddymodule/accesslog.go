package caddymodule

import (
	"net/http"
	"sync"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// Caddy's access log (a `log` in a site) encodes a copy of the request headers that Caddy takes
// before any handler runs, so no handler can redact X-Api-Key there; Caddy itself redacts
// Authorization (unless log_credentials). The operator must filter X-Api-Key out of that log, or
// have clients send Authorization: Bearer. This cannot be checked from a handler (the log's
// encoder is not visible to it), so the first key sent in X-API-Key on a server that writes an
// access log is warned about, once per server and process.

// warnedServers are the servers warned about (their *caddyhttp.Server, for the process's life).
var warnedServers sync.Map

// warnKeyInAccessLog warns once per server when r carries its key in X-API-Key on a server that
// writes an access log without log_credentials (with it, the operator chose to log keys).
func (h *Handler) warnKeyInAccessLog(r *http.Request) {
	if r.Header.Get("X-API-Key") == "" {
		return
	}
	srv, _ := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if srv == nil || srv.Logs == nil || srv.Logs.ShouldLogCredentials {
		return
	}
	if _, warned := warnedServers.LoadOrStore(srv, true); warned {
		return
	}
	h.logger.Warn("this site writes an access log, which records request headers as they arrived: an API key sent in "+
		"X-API-Key is written there in clear unless the log's format filter deletes request>headers>X-Api-Key "+
		"(docs/OPERATING.md, Logs); a key sent as Authorization: Bearer is redacted by Caddy",
		zap.Strings("listen", srv.Listen))
}
