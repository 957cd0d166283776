package caddymodule

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
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
	Queued       int    `json:"queued"` // requests waiting in the admission queues
	// ToolsUnavailable are the tools with model servers of their own none of which is healthy:
	// their requests fail (503, no charge) while the others are served, so the server stays ready.
	ToolsUnavailable []string `json:"tools_unavailable,omitempty"`
}

// serveReady answers GET /api/v1/ready for load balancers: 200 when the ledger is open and
// writable and at least one of the handler's model hosts is healthy, else 503 with the reason.
// The hosts and queues of tools with model servers of their own count too, and such a tool
// with no healthy host is named. It needs no key
// and costs no credit; it reads only in-memory state (the hosts' health comes from the
// backend's periodic checks), so it can be polled often.
func (h *Handler) serveReady(w http.ResponseWriter, r *http.Request, reqID string, store handlerLedger, servers backends.HostReporter) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, reqID, errMethodNotAllowedGET, -1)
		return
	}
	doc := readyDoc{Ledger: "ok"}
	if err := h.ledgerHealth(store); err != nil {
		switch {
		case errors.Is(err, ledger.ErrDiskFull):
			doc.Ledger = "unavailable"
			doc.Reason = "the ledger's disk is nearly full: new requests are refused until space is freed"
		case errors.Is(err, ledger.ErrUnavailable):
			doc.Ledger = "unavailable"
			doc.Reason = "the ledger cannot take new requests now"
		case errors.Is(err, textgenapp.ErrNotOpen):
			doc.Ledger = "unavailable"
			doc.Reason = "the ledger is not open yet: new requests are refused until it is"
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
	seen := map[backends.HostReporter]bool{}
	if !countHosts(&doc, servers, seen) && doc.Reason == "" {
		doc.Reason = "no model host is healthy"
	}
	for _, slug := range slices.Sorted(maps.Keys(h.tools)) {
		to, has := h.tools[slug].ownBackend()
		if has && (to == nil || !countHosts(&doc, to, seen)) {
			doc.ToolsUnavailable = append(doc.ToolsUnavailable, slug)
		}
	}
	doc.Ready = doc.Reason == ""
	status := http.StatusOK
	if !doc.Ready {
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "5")
	}
	writeJSON(w, r, reqID, status, doc)
}

// ledgerHealth is nil when the ledger takes new work, else why not: store's own health, or,
// with store nil, why the ledger is not open.
func (h *Handler) ledgerHealth(store handlerLedger) error {
	if store == nil {
		_, err := h.ledgerRef.Get()
		return err
	}
	return store.Health(context.Background())
}

// countHosts adds the hosts and queue of servers to doc once (seen: tools may share them) and
// reports whether one of its hosts is healthy.
func countHosts(doc *readyDoc, servers backends.HostReporter, seen map[backends.HostReporter]bool) (healthy bool) {
	first := !seen[servers]
	seen[servers] = true
	for _, hs := range servers.Hosts() {
		healthy = healthy || hs.Healthy
		if first {
			doc.Hosts++
			if hs.Healthy {
				doc.HostsHealthy++
			}
		}
	}
	if first {
		doc.Queued += servers.QueueLen()
	}
	return healthy
}
