package caddymodule

import (
	"context"
	"errors"
	"net/http"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/ledger"
)

// readyDoc is the answer of GET /api/v1/ready. It names no host, key or account: the endpoint
// is public (load balancers call it without a key).
type readyDoc struct {
	Ready        bool   `json:"ready"`
	Reason       string `json:"reason,omitempty"`
	Ledger       string `json:"ledger"`        // "ok", "unavailable" (reason says why), "closed" or "failed" (the log says why)
	HostsHealthy int    `json:"hosts_healthy"` // model hosts that answered their last check
	Hosts        int    `json:"hosts"`
	Queued       int    `json:"queued"` // requests waiting in the admission queue
}

// serveReady answers GET /api/v1/ready for load balancers: 200 when the ledger is open and
// writable and at least one model host is healthy, else 503 with the reason. It needs no key
// and costs no credit; it reads only in-memory state (the hosts' health comes from the
// backend's periodic checks), so it can be polled often.
func (h *Handler) serveReady(w http.ResponseWriter, r *http.Request, reqID string, store ledger.Store, o *backends.Ollama) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, reqID, errMethodNotAllowedGET, -1)
		return
	}
	doc := readyDoc{Ledger: "ok"}
	if err := store.Health(context.Background()); err != nil {
		switch {
		case errors.Is(err, ledger.ErrDiskFull):
			doc.Ledger = "unavailable"
			doc.Reason = "the ledger's disk is nearly full: new requests are refused until space is freed"
		case errors.Is(err, ledger.ErrUnavailable):
			doc.Ledger = "unavailable"
			doc.Reason = "the ledger cannot take new requests now"
		case errors.Is(err, ledger.ErrClosed):
			doc.Ledger = "closed"
			doc.Reason = "the ledger is not usable"
		default:
			doc.Ledger = "failed"
			doc.Reason = "the ledger is not usable"
		}
		if ce := h.logger.Check(zapcore.WarnLevel, "not ready: ledger"); ce != nil {
			ce.Write(zap.Error(err))
		}
	}
	for _, hs := range o.Hosts() {
		doc.Hosts++
		if hs.Healthy {
			doc.HostsHealthy++
		}
	}
	doc.Queued = o.QueueLen()
	if doc.HostsHealthy == 0 && doc.Reason == "" {
		doc.Reason = "no model host is healthy"
	}
	doc.Ready = doc.Reason == ""
	status := http.StatusOK
	if !doc.Ready {
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "5")
	}
	writeJSON(w, r, reqID, status, doc)
}
