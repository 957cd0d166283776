package caddymodule

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/receipts"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// Signed receipts (docs/RECEIPTS.md): GET /api/v1/generations/{request_id}/receipt answers a
// settled generation's receipt signed with the ledger's current Ed25519 key
// (internal/receipts), and GET /.well-known/textgen-receipt-keys lists every key's public half,
// so anyone can verify a receipt with nothing but that list. The signing key lives in the
// ledger sealed with the retention key (sealer.go), so signing needs retention on; the text's
// digest is kept for good by the ledger with the generation's last write (retention.go
// prepare), so a receipt can be signed after the text's window.

const (
	receiptKeysPath     = "/.well-known/textgen-receipt-keys"
	signedReceiptSuffix = "/receipt"
)

var (
	errReceiptNotFound = &apiError{Status: http.StatusNotFound, Code: "not_found",
		Message: "no signed receipt for this request id and this API key's account: a receipt is signed for a generation that was charged (settled) while the server kept generations (retention on)"}
	errReceiptsOff = &apiError{Status: http.StatusNotFound, Code: "not_found",
		Message: "this server signs no receipts: signing needs retention on (see docs/RECEIPTS.md)"}
)

// receiptSigning is the handler's signer, made once the ledger and the retention key are there,
// and registered for My Account and the admin API of the same ledger.
type receiptSigning struct {
	mu     sync.Mutex
	signer *receipts.Signer
	unreg  func()
}

// setupReceipts makes the signer when the app starts (Provision), and the ledger's first
// signing key with it, so that the key's period begins before anything it signs; a ledger that
// opens later gets both on first use. A failure here is logged, not fatal: signing tries again
// when a receipt is asked for.
func (h *Handler) setupReceipts(app *textgenapp.App) {
	if h.retain == nil {
		return
	}
	h.receipts = &receiptSigning{}
	app.OnStart(func() error {
		store := h.store()
		if store == nil {
			return nil
		}
		if sg := h.receiptSigner(store); sg != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := sg.Ensure(ctx); err != nil {
				h.logger.Warn("receipts: the signing key is not ready; signing tries again when a receipt is asked for", zap.Error(err))
			}
		}
		return nil
	})
}

// receiptSigner returns the signer of store, or nil when receipts are not signed here.
func (h *Handler) receiptSigner(store handlerLedger) *receipts.Signer {
	rs := h.receipts
	if rs == nil {
		return nil
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.signer == nil {
		s := h.retain.sealer.Load()
		if s == nil {
			return nil
		}
		rs.signer = receipts.New(store, s.s)
		rs.unreg = textgenapp.RegisterReceiptSigner(store, rs.signer)
	}
	return rs.signer
}

// unregister withdraws the signer (Cleanup).
func (rs *receiptSigning) unregister() {
	if rs == nil {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.unreg != nil {
		rs.unreg()
		rs.unreg = nil
	}
}

// textDigest is the SHA-256 of a generation's whole text.
func textDigest(pieces []string) []byte {
	d := sha256.New()
	for _, p := range pieces {
		d.Write([]byte(p))
	}
	return d.Sum(nil)
}

// serveReceiptKeys answers GET /.well-known/textgen-receipt-keys: every receipt key's public
// half, no key needed.
func (h *Handler) serveReceiptKeys(w http.ResponseWriter, r *http.Request, reqID string, store handlerLedger) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, reqID, errMethodNotAllowedGET, -1)
		return
	}
	sg := h.receiptSigner(store)
	if sg == nil {
		writeError(w, reqID, errReceiptsOff, -1)
		return
	}
	set, err := sg.PublicKeys(r.Context())
	if err != nil {
		h.ledgerError(w, reqID, "listing the receipt keys", err, -1)
		return
	}
	writeJSON(w, r, reqID, http.StatusOK, set)
}

// serveSignedReceipt answers GET /api/v1/generations/{request_id}/receipt for the key kc.
func (h *Handler) serveSignedReceipt(w http.ResponseWriter, r *http.Request, reqID string, store handlerLedger, kc keyCheck, rid string) {
	sg := h.receiptSigner(store)
	if sg == nil {
		writeError(w, reqID, errReceiptsOff, kc.available)
		return
	}
	if !isRequestID(rid) {
		writeError(w, reqID, errReceiptNotFound, kc.available)
		return
	}
	ctx := r.Context()
	acct := kc.acct.ID
	hold, err := store.GetHold(ctx, acct, rid)
	if errors.Is(err, ledger.ErrNotFound) || err == nil && hold.State != ledger.HoldSettled {
		writeError(w, reqID, errReceiptNotFound, kc.available)
		return
	}
	if err != nil {
		h.ledgerError(w, reqID, "reading the hold of a receipt", err, kc.available)
		return
	}
	digest, err := store.ReceiptDigest(ctx, acct, rid)
	if errors.Is(err, ledger.ErrNotFound) {
		// Its last write may still be on its way (the flusher writes after the response): the
		// text this instance keeps says the same.
		digest, err = h.liveDigest(r, store, acct, kc.key.Mode, rid)
	}
	if errors.Is(err, ledger.ErrNotFound) {
		writeError(w, reqID, errReceiptNotFound, kc.available)
		return
	}
	if err != nil {
		h.ledgerError(w, reqID, "reading the text digest of a receipt", err, kc.available)
		return
	}
	signed, err := sg.Sign(ctx, receipts.Generation{Type: "generation", RequestID: rid, AccountID: acct, KeyID: hold.KeyID,
		Tool: hold.Tool, Mode: string(hold.Mode), Credits: hold.Credits, Time: receipts.Time(hold.Resolved), TextSHA256: receipts.TextDigest(digest)})
	if err != nil {
		h.ledgerError(w, reqID, "signing a receipt", err, kc.available)
		return
	}
	hdr := w.Header()
	hdr.Set("X-Credits-Used", "0")
	hdr.Set("X-Credits-Remaining", strconv.FormatInt(kc.available, 10))
	writeJSON(w, r, reqID, http.StatusOK, signed)
}

// liveDigest is the digest of a generation that has ended and whose end the flusher has not
// written yet.
func (h *Handler) liveDigest(r *http.Request, store handlerLedger, acct string, mode ledger.Mode, rid string) ([]byte, error) {
	_, view, err := h.retain.find(r.Context(), store, acct, mode, rid)
	if err != nil {
		return nil, err
	}
	if view.voided || view.rec.State == ledger.GenerationRunning {
		return nil, ledger.ErrNotFound
	}
	return textDigest(view.pieces), nil
}

// ledgerError answers a failure of the ledger (receipts, usage.go's reports) or the receipt
// signer: 503 where the ledger cannot answer now, else 500, logged.
func (h *Handler) ledgerError(w http.ResponseWriter, reqID, what string, err error, available int64) {
	if errors.Is(err, ledger.ErrUnavailable) {
		writeError(w, reqID, errLedgerUnavailable, available)
		return
	}
	h.logger.Error(what, zap.String("request_id", reqID), zap.Error(err))
	writeError(w, reqID, errInternal, available)
}
