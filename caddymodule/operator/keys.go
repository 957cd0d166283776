package operator

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/ledger"
)

// API keys: POST and GET /textgen/accounts/{id}/keys, POST .../keys/{kid}/revoke.

func newKeyView(k ledger.Key) keyView {
	v := keyView{
		ID: k.ID, AccountID: k.AccountID, Mode: k.Mode, Name: k.Name,
		Hint: k.Prefix + "…" + k.Last4, Prefix: k.Prefix, Last4: k.Last4,
		Status: "active", Created: k.Created, LastUsed: k.LastUsed, Expires: k.Expires,
		Revoked: !k.Revoked.IsZero(), RevokedAt: k.Revoked, MemberID: k.MemberID, keyLimitsView: newKeyLimitsView(k),
	}
	switch {
	case v.Revoked:
		v.Status = "revoked"
	case !k.Expires.IsZero() && !now().Before(k.Expires):
		v.Status = "expired"
	}
	return v
}

func keyViews(keys []ledger.Key) []keyView {
	out := make([]keyView, 0, len(keys))
	for _, k := range keys {
		out = append(out, newKeyView(k))
	}
	return out
}

func (adminAPI) createKey(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var req createKeyRequest
	if err := decodeAdminJSON(r, &req, true); err != nil {
		return err
	}
	mode, err := parseMode(req.Mode)
	if err != nil {
		return err
	}
	name := strings.TrimSpace(req.Name)
	var expires time.Time
	if req.Expires != "" {
		expires, err = parseExpiry(req.Expires, now())
		if err != nil {
			return badRequest("expires: %v", err)
		}
	}
	id := r.PathValue("id")
	full, k, err := store.CreateKey(r.Context(), id, mode, name, expires)
	if err != nil {
		return accountError(err, id, "creating a key for account %s", id)
	}
	return writeAdminJSON(w, http.StatusCreated, createdKey{Key: full, keyView: newKeyView(k)})
}

// parseExpiry reads an RFC 3339 time or a positive duration from t; the result must be in the
// future.
func parseExpiry(s string, t time.Time) (time.Time, error) {
	var exp time.Time
	if ts, err := time.Parse(time.RFC3339, s); err == nil {
		exp = ts
	} else if d, derr := caddy.ParseDuration(s); derr == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("duration %q is not positive", s)
		}
		exp = t.Add(d)
	} else {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2030-01-02T15:04:05Z) nor a duration (720h, 90d)", s)
	}
	if !exp.After(t) {
		return time.Time{}, fmt.Errorf("%s is in the past", exp.UTC().Format(time.RFC3339))
	}
	return exp.UTC(), nil
}

func (adminAPI) listKeys(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	id := r.PathValue("id")
	keys, err := store.ListKeys(r.Context(), id)
	if err != nil {
		return accountError(err, id, "listing the keys of account %s", id)
	}
	return writeAdminJSON(w, http.StatusOK, keyList{Keys: keyViews(keys)})
}

func (adminAPI) revokeKey(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	if err := decodeAdminJSON(r, &struct{}{}, true); err != nil {
		return err
	}
	id, kid := r.PathValue("id"), r.PathValue("kid")
	k, err := store.RevokeKey(r.Context(), id, kid)
	switch {
	case errors.Is(err, ledger.ErrAlreadyRevoked):
		msg := fmt.Sprintf("key %s of account %s is already revoked", kid, id)
		if !k.Revoked.IsZero() {
			msg += " (since " + k.Revoked.UTC().Format(time.RFC3339) + ")"
		}
		return caddy.APIError{HTTPStatus: http.StatusConflict, Err: errors.New(msg)}
	case errors.Is(err, ledger.ErrNotFound):
		// no such account, or no such key of it: only this failure asks which
		if _, gerr := store.GetAccount(r.Context(), id); gerr != nil {
			return accountError(gerr, id, "reading account %s", id)
		}
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("account %s has no key %s", id, kid)}
	case err != nil:
		return ledgerError(err, "revoking key %s of account %s", kid, id)
	}
	return writeAdminJSON(w, http.StatusOK, newKeyView(k))
}
