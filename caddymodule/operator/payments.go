package operator

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/caddy-textgen/textgen/ledger"
)

// Unmatched payments: GET /textgen/payments and POST /textgen/payments/{reference}/resolve.
// A paid Checkout Session the webhook could not credit (another amount, an unknown package or
// account) is kept in the ledger; these routes are the operator's to-do list of them.

func (adminAPI) listPayments(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
	q := r.URL.Query()
	openOnly := true
	if s := q.Get("all"); s != "" {
		all, err := strconv.ParseBool(s)
		if err != nil {
			return badRequest("all: %q is neither true nor false", s)
		}
		openOnly = !all
	}
	limit, err := limitFromQuery(r, "payments")
	if err != nil {
		return err
	}
	ps, err := store.UnmatchedPayments(r.Context(), openOnly, limit)
	if err != nil {
		return ledgerError(err, "listing unmatched payments")
	}
	if ps == nil {
		ps = []ledger.UnmatchedPayment{}
	}
	return writeAdminJSON(w, http.StatusOK, paymentList{Payments: ps, OpenOnly: openOnly})
}

func (adminAPI) resolvePayment(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
	var req resolvePaymentRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	note := strings.TrimSpace(req.Note)
	if note == "" {
		return badRequest("note is required: say what was done (credited by hand, refunded); it stays in the ledger")
	}
	ref := r.PathValue("reference")
	p, repeated, err := store.ResolveUnmatchedPayment(r.Context(), ref, note)
	if err != nil {
		return ledgerError(err, "resolving unmatched payment %s", ref)
	}
	return writeAdminJSON(w, http.StatusOK, resolvedPayment{Payment: p, Repeated: repeated})
}
