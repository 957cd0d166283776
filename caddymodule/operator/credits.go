package operator

import (
	"cmp"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// Credits: POST /textgen/accounts/{id}/credits (a grant) and .../adjust (a correction).

func (a adminAPI) grant(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	return a.credit(w, r, store, ledger.KindGrant)
}

func (a adminAPI) adjust(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	return a.credit(w, r, store, ledger.KindAdjustment)
}

func (adminAPI) credit(w http.ResponseWriter, r *http.Request, store operatorLedger, kind ledger.EntryKind) error {
	var req grantRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	id := r.PathValue("id")
	var expires time.Time
	if s := strings.TrimSpace(req.Expires); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return badRequest("expires: %q is not an RFC 3339 time (2026-12-31T23:59:59Z)", s)
		}
		expires = t
	}
	var mode ledger.Mode
	var res ledger.GrantResult
	detail := fmt.Sprintf("%+d %s credits", req.Credits, cmp.Or(req.Mode, string(ledger.Live)))
	if ref := strings.TrimSpace(req.Reference); ref != "" {
		detail += ", reference " + ref
	}
	if !expires.IsZero() {
		detail += ", expiring " + expires.UTC().Format(time.RFC3339)
	}
	err := audited(r.Context(), store, string(kind), id, detail, strings.TrimSpace(req.Reason), func() (err error) {
		mode, res, err = Credit(r.Context(), store, id, kind, req.Mode, req.Credits, req.Reference, req.Reason, expires)
		return err
	})
	if err != nil {
		return err
	}
	out := creditsResult{
		AccountID: id, Kind: kind, Mode: mode, Credited: req.Credits, Reference: strings.TrimSpace(req.Reference),
		Repeated: res.Repeated, Entry: res.Entry, Credits: res.Balance,
		Balance:   byMode(mode, res.Balance.Balance, res.Balance.TestBalance),
		Available: byMode(mode, res.Balance.Available, res.Balance.TestAvailable),
	}
	if res.Repeated {
		out.Credited = 0
	}
	return writeAdminJSON(w, http.StatusOK, out)
}

func byMode(mode ledger.Mode, live, test int64) int64 {
	if mode == ledger.Test {
		return test
	}
	return live
}
