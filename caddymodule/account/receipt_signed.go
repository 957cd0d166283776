package account

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/caddy-textgen/textgen/caddymodule/internal/receipts"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// The signed receipt of a purchase (docs/RECEIPTS.md): GET {prefix}/receipts/{reference}/signed
// downloads the purchase's receipt as JSON signed with the ledger's receipt key, which the
// customer's accountant verifies with the public keys at /.well-known/textgen-receipt-keys. The
// textgen handler of the same ledger signs it (it holds the sealing key of the signing key);
// without one the receipt page offers no download.

// receiptSigner is the signer of the area's ledger, or nil.
func (a *app) receiptSigner() textgenapp.ReceiptSigner {
	m, ok := a.store.(ledger.Maintenance)
	if !ok {
		return nil
	}
	return textgenapp.ReceiptSignerFor(m)
}

func (a *app) signedReceipt(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	ref := r.PathValue("reference")
	e, err := a.store.Purchase(r.Context(), sc.acct.ID, ref)
	if errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrInvalidArgument) {
		a.errorPage(w, r, sc, http.StatusNotFound, "Receipt not found", "You have no purchase with this payment reference.")
		return
	}
	if err != nil {
		a.internalError(w, r, sc, "reading the purchase", err)
		return
	}
	sg := a.receiptSigner()
	if sg == nil {
		a.errorPage(w, r, sc, http.StatusNotFound, "No signed receipt", "This site does not sign receipts. The receipt page is your record of the purchase.")
		return
	}
	signed, err := sg.Sign(r.Context(), receipts.Purchase{Type: "purchase", Reference: e.Reference, AccountID: sc.acct.ID,
		Credits: e.Amount, AmountCents: e.AmountCents, Currency: e.Currency, Time: receipts.Time(e.Time)})
	if err != nil {
		a.internalError(w, r, sc, "signing a receipt", err)
		return
	}
	body, err := json.MarshalIndent(signed, "", "  ")
	if err != nil {
		a.internalError(w, r, sc, "encoding a signed receipt", err)
		return
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Disposition", `attachment; filename="receipt-`+safeFileName(ref)+`.json"`)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// safeFileName keeps letters, digits, '-' and '_' of s (a payment reference), for a download's
// name.
func safeFileName(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s) && len(b) < 100; i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b = append(b, c)
		}
	}
	return string(b)
}
