package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/ledger"
)

// Redemption codes: POST /textgen/codes (create; the code is in this answer only),
// GET /textgen/codes, GET /textgen/codes/{id}/redemptions and POST /textgen/codes/{id}/disable.
// A customer redeems a code in My Account or with POST /api/v1/credits/redeem.

// maxCodeNote is the longest note a code may carry (the ledger's limit).
const maxCodeNote = 200

// CreateCode makes a code worth credits live credits for up to uses accounts (0: 1), that
// stops working at expires (zero: never). The code is returned once; the ledger keeps only its
// digest.
func CreateCode(ctx context.Context, store ledger.Codes, credits, uses int64, expires time.Time, note string) (string, ledger.RedemptionCode, error) {
	if credits < 1 || credits > ledger.MaxCodeCredits {
		return "", ledger.RedemptionCode{}, badRequest("credits: a code is worth a whole number of credits from 1 to %d", ledger.MaxCodeCredits)
	}
	if uses < 0 || uses > ledger.MaxCodeUses {
		return "", ledger.RedemptionCode{}, badRequest("uses: how many accounts may redeem the code, from 1 to %d", ledger.MaxCodeUses)
	}
	if !expires.IsZero() && !expires.After(now()) {
		return "", ledger.RedemptionCode{}, badRequest("expires: %s is not in the future", expires.UTC().Format(time.RFC3339))
	}
	note = strings.TrimSpace(note)
	if len(note) > maxCodeNote {
		return "", ledger.RedemptionCode{}, badRequest("note: at most %d bytes", maxCodeNote)
	}
	code, c, err := store.CreateCode(ctx, ledger.NewCode{Credits: credits, MaxUses: uses, Expires: expires, Note: note})
	if err != nil {
		return "", ledger.RedemptionCode{}, ledgerError(err, "creating a code")
	}
	return code, c, nil
}

// DisableCode stops a code at once; redemptions made stay. A disabled code is returned as it is.
func DisableCode(ctx context.Context, store ledger.Codes, id string) (ledger.RedemptionCode, error) {
	c, err := store.DisableCode(ctx, strings.TrimSpace(id))
	if err != nil {
		return ledger.RedemptionCode{}, codeError(err, id, "disabling code %s", id)
	}
	return c, nil
}

// codeError is ledgerError with the code's own 404.
func codeError(err error, id, format string, args ...any) error {
	if errors.Is(err, ledger.ErrNotFound) {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("code %s not found (see 'caddy textgen code list')", id)}
	}
	return ledgerError(err, format, args...)
}

// codeView is a code as the admin API shows it: never the code, with its state now.
type codeView struct {
	ledger.RedemptionCode
	State string `json:"state"` // active, disabled, expired or used up
}

func viewCode(c ledger.RedemptionCode) codeView {
	return codeView{RedemptionCode: c, State: c.State(now())}
}

// codeCreateRequest asks for a code (POST /textgen/codes).
type codeCreateRequest struct {
	Credits int64 `json:"credits"`
	// Uses is how many accounts may redeem it; 0: 1.
	Uses int64 `json:"uses"`
	// Expires is when it stops working (RFC 3339); empty: never.
	Expires string `json:"expires"`
	Note    string `json:"note"`
}

// codeCreated answers a create: the code, shown here only.
type codeCreated struct {
	Code string `json:"code"`
	codeView
}

type codeList struct {
	Codes []codeView `json:"codes"`
}

type codeRedemptions struct {
	Code        codeView                `json:"code"`
	Redemptions []ledger.CodeRedemption `json:"redemptions"`
}

func (adminAPI) createCode(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var req codeCreateRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	var expires time.Time
	if s := strings.TrimSpace(req.Expires); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return badRequest("expires: %q is not an RFC 3339 time such as 2026-12-31T23:59:59Z", s)
		}
		expires = t
	}
	detail := codeDetail(req.Credits, req.Uses, expires)
	var code string
	var c ledger.RedemptionCode
	err := audited(r.Context(), store, "code.create", "", detail, req.Note, func() (err error) {
		code, c, err = CreateCode(r.Context(), store, req.Credits, req.Uses, expires, req.Note)
		return err
	})
	if err != nil {
		return err
	}
	// The record names the code's id only once it exists.
	_, _ = store.AppendAudit(r.Context(), adminAuditRecord("code.created", c.ID+": "+detail, req.Note))
	return writeAdminJSON(w, http.StatusOK, codeCreated{Code: code, codeView: viewCode(c)})
}

// codeDetail is what the audit log says of a code.
func codeDetail(credits, uses int64, expires time.Time) string {
	d := fmt.Sprintf("%d credits, %d uses", credits, max(uses, 1))
	if !expires.IsZero() {
		d += ", expires " + expires.UTC().Format(time.RFC3339)
	}
	return d
}

// adminAuditRecord is a record of the admin API's.
func adminAuditRecord(action, detail, note string) ledger.AuditRecord {
	rec := adminAuditor
	rec.Action, rec.Detail, rec.Note = action, detail, strings.TrimSpace(note)
	if rec.Note == "" {
		rec.Note = noNote
	}
	return rec
}

func (adminAPI) listCodes(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	limit, err := limitFromQuery(r, "codes")
	if err != nil {
		return err
	}
	cs, err := store.ListCodes(r.Context(), limit)
	if err != nil {
		return ledgerError(err, "listing codes")
	}
	out := codeList{Codes: make([]codeView, 0, len(cs))}
	for _, c := range cs {
		out.Codes = append(out.Codes, viewCode(c))
	}
	return writeAdminJSON(w, http.StatusOK, out)
}

func (adminAPI) disableCode(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var req struct {
		Note string `json:"note"`
	}
	if err := decodeAdminJSON(r, &req, true); err != nil {
		return err
	}
	id := r.PathValue("id")
	var c ledger.RedemptionCode
	err := audited(r.Context(), store, "code.disable", "", id, req.Note, func() (err error) {
		c, err = DisableCode(r.Context(), store, id)
		return err
	})
	if err != nil {
		return err
	}
	return writeAdminJSON(w, http.StatusOK, viewCode(c))
}

func (adminAPI) codeRedemptions(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	limit, err := limitFromQuery(r, "redemptions")
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	c, err := store.GetCode(r.Context(), id)
	if err != nil {
		return codeError(err, id, "reading code %s", id)
	}
	reds, err := store.CodeRedemptions(r.Context(), id, limit)
	if err != nil {
		return codeError(err, id, "listing the redemptions of code %s", id)
	}
	return writeAdminJSON(w, http.StatusOK, codeRedemptions{Code: viewCode(c), Redemptions: reds})
}
