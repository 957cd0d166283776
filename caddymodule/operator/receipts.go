package operator

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/caddymodule/internal/receipts"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// The receipt signing keys (docs/RECEIPTS.md): listed, and rotated by the textgen handler of
// the ledger, which holds the sealing key that opens them. A rotation makes a new current key;
// the old ones stay listed at /.well-known/textgen-receipt-keys so that receipts they signed
// still verify.

// receiptKeysResponse is the answer of both routes.
type receiptKeysResponse struct {
	Keys []receipts.PublicKey `json:"keys"`
	// Current is the key that signs from now on.
	Current string `json:"current"`
}

func receiptSigner(store operatorLedger) (textgenapp.ReceiptSigner, error) {
	sg := textgenapp.ReceiptSignerFor(store)
	if sg == nil {
		return nil, caddy.APIError{HTTPStatus: http.StatusConflict,
			Err: errors.New("no textgen handler with retention on serves this ledger: receipts are signed by the handler, with its retention key")}
	}
	return sg, nil
}

// receiptKeys answers GET /textgen/receipts/keys.
func (adminAPI) receiptKeys(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	sg, err := receiptSigner(store)
	if err != nil {
		return err
	}
	return writeReceiptKeys(w, r, sg)
}

// rotateReceiptKey answers POST /textgen/receipts/rotate-key.
func (adminAPI) rotateReceiptKey(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	if err := decodeAdminJSON(r, &struct{}{}, true); err != nil {
		return err
	}
	sg, err := receiptSigner(store)
	if err != nil {
		return err
	}
	err = audited(r.Context(), store, "receipts.rotate-key", "", "receipt signing key", "", func() error {
		_, err := sg.Rotate(r.Context())
		return err
	})
	if err != nil {
		return receiptKeyError(err, "rotating the receipt key")
	}
	return writeReceiptKeys(w, r, sg)
}

func writeReceiptKeys(w http.ResponseWriter, r *http.Request, sg textgenapp.ReceiptSigner) error {
	set, err := sg.PublicKeys(r.Context())
	if err != nil {
		return receiptKeyError(err, "listing the receipt keys")
	}
	res := receiptKeysResponse{Keys: set.Keys}
	for _, k := range set.Keys {
		if k.Current {
			res.Current = k.KeyID
		}
	}
	return writeAdminJSON(w, http.StatusOK, res)
}

func receiptKeyError(err error, what string) error {
	status := http.StatusInternalServerError
	if errors.Is(err, ledger.ErrUnavailable) {
		status = http.StatusServiceUnavailable
	}
	return caddy.APIError{HTTPStatus: status, Err: fmt.Errorf("%s: %w", what, err)}
}
