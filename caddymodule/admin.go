package caddymodule

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

func init() {
	caddy.RegisterModule(adminAPI{})
}

// adminAPI is the admin.api.textgen module: the operator's interface to the ledger on Caddy's
// admin endpoint. It holds no state of its own; it reaches the ledger through the pool the
// textgen handlers open it in (openLedgers), so it loads, and answers 503, even when the config
// has no textgen handler.
//
// Every route takes and returns JSON (except the backup download). Errors are caddy.APIError,
// which Caddy writes as {"error": "<message>"}.
//
//	GET  /textgen/ledgers                                  the ledger directories open in this process
//	POST /textgen/accounts                                 {"email"} → the account (201)
//	GET  /textgen/accounts?cursor=&limit=                  {"accounts", "next_cursor"}
//	GET  /textgen/accounts/{id}                            the account with its balance and keys
//	POST /textgen/accounts/{id}/disable                    the account
//	POST /textgen/accounts/{id}/enable                     the account
//	POST /textgen/accounts/{id}/keys                       {"mode", "name", "expires"} → the key, with the full "key" (201)
//	GET  /textgen/accounts/{id}/keys                       {"keys"}
//	POST /textgen/accounts/{id}/keys/{kid}/revoke          the key, "revoked": true
//	POST /textgen/accounts/{id}/credits                    {"credits", "reference", "mode"} → grant result
//	POST /textgen/accounts/{id}/adjust                     {"credits", "reason", "reference", "mode"} → adjustment result
//	GET  /textgen/accounts/{id}/balance                    ledger.Balance
//	GET  /textgen/accounts/{id}/ledger?cursor=&limit=      {"entries", "next_cursor"}
//	GET  /textgen/usage?account=&from=&to=                 requests and credits per tool and per day;
//	                                                       from/to: a day (UTC; "to" includes it) or an RFC 3339 time ("to" excluded)
//	GET  /textgen/ledger/verify                            ledger.VerifyReport (200 also when not ok)
//	GET  /textgen/backup                                   the online backup stream (application/octet-stream)
//
// When several ledgers are open (several textgen handlers with different directories), every
// route but /textgen/ledgers needs ?ledger=<dir>.
type adminAPI struct{}

// CaddyModule returns the Caddy module information.
func (adminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.textgen",
		New: func() caddy.Module { return new(adminAPI) },
	}
}

const (
	adminPrefix = "/textgen/"
	// maxAdminBody caps request bodies; the largest legitimate one is a few hundred bytes.
	maxAdminBody = 64 << 10
	// maxCreditsPerCall keeps a typo (an extra zero, a pasted number) from creating an absurd
	// amount of credits in one call, and keeps sums far from int64 overflow.
	maxCreditsPerCall = 1_000_000_000
)

// adminErrKey carries a pointer to the route's error through the inner ServeMux, whose handlers
// cannot return one.
type adminErrKey struct{}

// adminFunc is one route: the selected ledger is passed in; errors are returned, not written.
type adminFunc func(w http.ResponseWriter, r *http.Request, store ledger.Store) error

// Routes returns the single /textgen/ route; an inner ServeMux with method and wildcard
// patterns dispatches below it.
func (a adminAPI) Routes() []caddy.AdminRoute {
	mux := http.NewServeMux()
	handle := func(pattern string, f adminFunc) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			slot, _ := r.Context().Value(adminErrKey{}).(*error)
			err := a.withLedger(w, r, f)
			if slot != nil {
				*slot = err
			}
		})
	}
	mux.HandleFunc("GET /textgen/ledgers", func(w http.ResponseWriter, r *http.Request) {
		dirs := openLedgerDirs()
		if dirs == nil {
			dirs = []string{}
		}
		if slot, _ := r.Context().Value(adminErrKey{}).(*error); slot != nil {
			*slot = writeAdminJSON(w, http.StatusOK, map[string]any{"ledgers": dirs})
		}
	})
	handle("POST /textgen/accounts", a.createAccount)
	handle("GET /textgen/accounts", a.listAccounts)
	handle("GET /textgen/accounts/{id}", a.getAccount)
	handle("POST /textgen/accounts/{id}/disable", a.setStatus(ledger.StatusDisabled))
	handle("POST /textgen/accounts/{id}/enable", a.setStatus(ledger.StatusActive))
	handle("POST /textgen/accounts/{id}/keys", a.createKey)
	handle("GET /textgen/accounts/{id}/keys", a.listKeys)
	handle("POST /textgen/accounts/{id}/keys/{kid}/revoke", a.revokeKey)
	handle("POST /textgen/accounts/{id}/credits", a.grant)
	handle("POST /textgen/accounts/{id}/adjust", a.adjust)
	handle("GET /textgen/accounts/{id}/balance", a.balance)
	handle("GET /textgen/accounts/{id}/ledger", a.history)
	handle("GET /textgen/usage", a.usage)
	handle("GET /textgen/ledger/verify", a.verify)
	handle("GET /textgen/backup", a.backup)
	mux.HandleFunc(adminPrefix, func(w http.ResponseWriter, r *http.Request) {
		if slot, _ := r.Context().Value(adminErrKey{}).(*error); slot != nil {
			*slot = unknownRoute(mux, w, r)
		}
	})

	return []caddy.AdminRoute{{
		Pattern: adminPrefix,
		Handler: caddy.AdminHandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			var err error
			mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), adminErrKey{}, &err)))
			return err
		}),
	}}
}

// unknownRoute tells a wrong method (405, with Allow) from an unknown path (404).
func unknownRoute(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) error {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		r2 := r.Clone(r.Context())
		r2.Method = m
		if _, pattern := mux.Handler(r2); pattern != "" && pattern != adminPrefix {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		return caddy.APIError{
			HTTPStatus: http.StatusMethodNotAllowed,
			Err:        fmt.Errorf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(allowed, " or ")),
		}
	}
	return caddy.APIError{
		HTTPStatus: http.StatusNotFound,
		Err:        fmt.Errorf("unknown textgen admin route %s %s", r.Method, r.URL.Path),
	}
}

// withLedger selects the ledger the request is about and calls f with it.
func (adminAPI) withLedger(w http.ResponseWriter, r *http.Request, f adminFunc) error {
	store, err := selectLedger(r.URL.Query().Get("ledger"))
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return f(w, r, store)
}

// selectLedger picks the open ledger: the only one, or the one named by dir.
func selectLedger(dir string) (ledger.Store, error) {
	open := textgenapp.OpenLedgers()
	if len(open) == 0 {
		return nil, caddy.APIError{
			HTTPStatus: http.StatusServiceUnavailable,
			Err:        errors.New("no textgen ledger is open: the config has no textgen handler"),
		}
	}
	if dir != "" {
		if b, ok := open[dir]; ok {
			return b, nil
		}
		if abs, err := caddy.FastAbs(dir); err == nil {
			if b, ok := open[abs]; ok {
				return b, nil
			}
		}
		return nil, caddy.APIError{
			HTTPStatus: http.StatusNotFound,
			Err:        fmt.Errorf("no textgen ledger is open at %s; open ledgers: %s", dir, strings.Join(openLedgerDirs(), ", ")),
		}
	}
	if len(open) > 1 {
		return nil, caddy.APIError{
			HTTPStatus: http.StatusBadRequest,
			Err:        fmt.Errorf("%d textgen ledgers are open (%s): choose one with ?ledger=<dir> (--ledger in the CLI)", len(open), strings.Join(openLedgerDirs(), ", ")),
		}
	}
	var only ledger.Store
	for _, b := range open {
		only = b
	}
	return only, nil
}

func openLedgerDirs() []string {
	var dirs []string
	for d := range textgenapp.OpenLedgers() {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	return dirs
}

// --- accounts ---

type createAccountRequest struct {
	Email string `json:"email"`
}

func (adminAPI) createAccount(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
	var req createAccountRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	email := strings.TrimSpace(req.Email)
	if email == "" {
		return badRequest("email is required")
	}
	acct, err := store.CreateAccount(r.Context(), email)
	if err != nil {
		if errors.Is(err, ledger.ErrDuplicateEmail) {
			return caddy.APIError{HTTPStatus: http.StatusConflict, Err: fmt.Errorf("an account with email %s exists already", email)}
		}
		return ledgerError(err, "creating account for %s", email)
	}
	return writeAdminJSON(w, http.StatusCreated, acct)
}

type accountList struct {
	Accounts   []ledger.Account `json:"accounts"`
	NextCursor string           `json:"next_cursor"`
}

func (adminAPI) listAccounts(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
	page, err := pageFromQuery(r)
	if err != nil {
		return err
	}
	accts, next, err := store.ListAccounts(r.Context(), page)
	if err != nil {
		return ledgerError(err, "listing accounts")
	}
	if accts == nil {
		accts = []ledger.Account{}
	}
	return writeAdminJSON(w, http.StatusOK, accountList{Accounts: accts, NextCursor: next})
}

// accountDetail is an account with what an operator looks at next: its credits and keys.
type accountDetail struct {
	ledger.Account
	Credits ledger.Balance `json:"credits"`
	Keys    []keyView      `json:"keys"`
}

func (adminAPI) getAccount(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
	acct, err := findAccount(r.Context(), store, r.PathValue("id"))
	if err != nil {
		return err
	}
	bal, err := store.Balance(r.Context(), acct.ID)
	if err != nil {
		return ledgerError(err, "reading the balance of account %s", acct.ID)
	}
	keys, err := store.ListKeys(r.Context(), acct.ID)
	if err != nil {
		return ledgerError(err, "listing the keys of account %s", acct.ID)
	}
	return writeAdminJSON(w, http.StatusOK, accountDetail{Account: acct, Credits: bal, Keys: keyViews(keys)})
}

func (adminAPI) setStatus(status ledger.AccountStatus) adminFunc {
	return func(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
		if err := decodeAdminJSON(r, &struct{}{}, true); err != nil {
			return err
		}
		acct, err := findAccount(r.Context(), store, r.PathValue("id"))
		if err != nil {
			return err
		}
		acct, err = store.SetAccountStatus(r.Context(), acct.ID, status)
		if err != nil {
			return ledgerError(err, "setting account %s %s", r.PathValue("id"), status)
		}
		return writeAdminJSON(w, http.StatusOK, acct)
	}
}

// findAccount returns the account or a 404 that names the id.
func findAccount(ctx context.Context, store ledger.Store, id string) (ledger.Account, error) {
	if strings.TrimSpace(id) == "" {
		return ledger.Account{}, badRequest("an account id is required")
	}
	acct, err := store.GetAccount(ctx, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return ledger.Account{}, caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("account %s not found", id)}
	}
	if err != nil {
		return ledger.Account{}, ledgerError(err, "reading account %s", id)
	}
	return acct, nil
}

// --- keys ---

// keyView is what the admin API shows of a key. It is built field by field so that nothing but
// the public parts (never a digest) can reach a response.
type keyView struct {
	ID        string      `json:"id"`
	AccountID string      `json:"account_id"`
	Mode      ledger.Mode `json:"mode"`
	Name      string      `json:"name"`
	// Hint is how the key is shown after its creation: prefix, an ellipsis, the last 4 characters.
	Hint      string    `json:"hint"`
	Prefix    string    `json:"prefix"`
	Last4     string    `json:"last4"`
	Status    string    `json:"status"` // active, revoked or expired
	Created   time.Time `json:"created"`
	LastUsed  time.Time `json:"last_used,omitzero"`
	Expires   time.Time `json:"expires,omitzero"`
	Revoked   bool      `json:"revoked"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

func newKeyView(k ledger.Key) keyView {
	v := keyView{
		ID: k.ID, AccountID: k.AccountID, Mode: k.Mode, Name: k.Name,
		Hint: k.Prefix + "…" + k.Last4, Prefix: k.Prefix, Last4: k.Last4,
		Status: "active", Created: k.Created, LastUsed: k.LastUsed, Expires: k.Expires,
		Revoked: !k.Revoked.IsZero(), RevokedAt: k.Revoked,
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

type createKeyRequest struct {
	Mode string `json:"mode"` // live (default) or test
	Name string `json:"name"`
	// Expires is an RFC 3339 time or a duration from now ("720h", "90d"); empty: never.
	Expires string `json:"expires"`
}

// createdKey is the only response that ever carries a full key.
type createdKey struct {
	Key string `json:"key"`
	keyView
}

func (adminAPI) createKey(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
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
	acct, err := findAccount(r.Context(), store, r.PathValue("id"))
	if err != nil {
		return err
	}
	full, k, err := store.CreateKey(r.Context(), acct.ID, mode, name, expires)
	if err != nil {
		return ledgerError(err, "creating a key for account %s", acct.ID)
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

type keyList struct {
	Keys []keyView `json:"keys"`
}

func (adminAPI) listKeys(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
	acct, err := findAccount(r.Context(), store, r.PathValue("id"))
	if err != nil {
		return err
	}
	keys, err := store.ListKeys(r.Context(), acct.ID)
	if err != nil {
		return ledgerError(err, "listing the keys of account %s", acct.ID)
	}
	return writeAdminJSON(w, http.StatusOK, keyList{Keys: keyViews(keys)})
}

func (adminAPI) revokeKey(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
	if err := decodeAdminJSON(r, &struct{}{}, true); err != nil {
		return err
	}
	acct, err := findAccount(r.Context(), store, r.PathValue("id"))
	if err != nil {
		return err
	}
	kid := r.PathValue("kid")
	k, err := store.RevokeKey(r.Context(), acct.ID, kid)
	switch {
	case errors.Is(err, ledger.ErrAlreadyRevoked):
		msg := fmt.Sprintf("key %s of account %s is already revoked", kid, acct.ID)
		if !k.Revoked.IsZero() {
			msg += " (since " + k.Revoked.UTC().Format(time.RFC3339) + ")"
		}
		return caddy.APIError{HTTPStatus: http.StatusConflict, Err: errors.New(msg)}
	case errors.Is(err, ledger.ErrNotFound):
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("account %s has no key %s", acct.ID, kid)}
	case err != nil:
		return ledgerError(err, "revoking key %s of account %s", kid, acct.ID)
	}
	return writeAdminJSON(w, http.StatusOK, newKeyView(k))
}

// --- credits ---

type grantRequest struct {
	Credits   int64  `json:"credits"`
	Reference string `json:"reference"`
	Mode      string `json:"mode"`
	Reason    string `json:"reason"`
}

// creditsResult answers a grant or an adjustment.
type creditsResult struct {
	AccountID string           `json:"account_id"`
	Kind      ledger.EntryKind `json:"kind"`
	Mode      ledger.Mode      `json:"mode"`
	// Credited is what this call changed: the requested credits, or 0 when Repeated.
	Credited  int64  `json:"credited"`
	Reference string `json:"reference,omitempty"`
	// Repeated: the reference had been used already, nothing was credited, Entry is the first one.
	Repeated bool `json:"repeated"`
	// Balance and Available are the figures of Mode right after the call.
	Balance   int64        `json:"balance"`
	Available int64        `json:"available"`
	Entry     ledger.Entry `json:"entry"`
	// Credits has the account's live and test figures.
	Credits ledger.Balance `json:"credits"`
}

func (a adminAPI) grant(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
	var req grantRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	if req.Credits <= 0 || req.Credits > maxCreditsPerCall {
		return badRequest("credits: a grant is a whole number from 1 to %d; use adjust to remove credits", maxCreditsPerCall)
	}
	return a.credit(w, r, store, ledger.KindGrant, req)
}

func (a adminAPI) adjust(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
	var req grantRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	if req.Credits == 0 || req.Credits > maxCreditsPerCall || req.Credits < -maxCreditsPerCall {
		return badRequest("credits: an adjustment is a non-zero whole number from -%d to %d", maxCreditsPerCall, maxCreditsPerCall)
	}
	if strings.TrimSpace(req.Reason) == "" {
		return badRequest("reason is required for an adjustment (it stays in the ledger)")
	}
	return a.credit(w, r, store, ledger.KindAdjustment, req)
}

func (adminAPI) credit(w http.ResponseWriter, r *http.Request, store ledger.Store, kind ledger.EntryKind, req grantRequest) error {
	mode, err := parseMode(req.Mode)
	if err != nil {
		return err
	}
	ref, reason := strings.TrimSpace(req.Reference), strings.TrimSpace(req.Reason)
	acct, err := findAccount(r.Context(), store, r.PathValue("id"))
	if err != nil {
		return err
	}
	res, err := store.Grant(r.Context(), ledger.GrantRequest{
		AccountID: acct.ID, Mode: mode, Kind: kind, Credits: req.Credits, Reference: ref, Reason: reason,
	})
	if err != nil {
		if errors.Is(err, ledger.ErrInsufficientCredits) {
			msg := fmt.Sprintf("refused: removing %d %s credits would take account %s below zero", -req.Credits, mode, acct.ID)
			if bal, berr := store.Balance(r.Context(), acct.ID); berr == nil {
				msg += fmt.Sprintf(" (balance %d, available %d)", byMode(mode, bal.Balance, bal.TestBalance), byMode(mode, bal.Available, bal.TestAvailable))
			}
			return caddy.APIError{HTTPStatus: http.StatusConflict, Err: errors.New(msg)}
		}
		return ledgerError(err, "crediting account %s", acct.ID)
	}
	out := creditsResult{
		AccountID: acct.ID, Kind: kind, Mode: mode, Credited: req.Credits, Reference: ref,
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

func (adminAPI) balance(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
	acct, err := findAccount(r.Context(), store, r.PathValue("id"))
	if err != nil {
		return err
	}
	bal, err := store.Balance(r.Context(), acct.ID)
	if err != nil {
		return ledgerError(err, "reading the balance of account %s", acct.ID)
	}
	return writeAdminJSON(w, http.StatusOK, bal)
}

type entryList struct {
	AccountID  string         `json:"account_id"`
	Entries    []ledger.Entry `json:"entries"`
	NextCursor string         `json:"next_cursor"`
}

func (adminAPI) history(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
	page, err := pageFromQuery(r)
	if err != nil {
		return err
	}
	acct, err := findAccount(r.Context(), store, r.PathValue("id"))
	if err != nil {
		return err
	}
	entries, next, err := store.History(r.Context(), acct.ID, page)
	if err != nil {
		return ledgerError(err, "reading the ledger of account %s", acct.ID)
	}
	if entries == nil {
		entries = []ledger.Entry{}
	}
	return writeAdminJSON(w, http.StatusOK, entryList{AccountID: acct.ID, Entries: entries, NextCursor: next})
}

// --- usage ---

// usageSum is one line of a usage total.
type usageSum struct {
	Day      string      `json:"day,omitempty"`
	Tool     string      `json:"tool,omitempty"`
	Mode     ledger.Mode `json:"mode"`
	Requests int64       `json:"requests"`
	Settled  int64       `json:"settled"`
	Voided   int64       `json:"voided"`
}

// usageReport is the usage summary: the ledger's rows (per day, tool and mode) and their sums
// per tool, per day and per mode. Live and test are never added together: test credits are free.
type usageReport struct {
	AccountID string            `json:"account_id,omitempty"`
	From      string            `json:"from,omitempty"`
	To        string            `json:"to,omitempty"`
	Rows      []ledger.UsageRow `json:"rows"`
	ByTool    []usageSum        `json:"by_tool"`
	ByDay     []usageSum        `json:"by_day"`
	Total     []usageSum        `json:"total"`
}

func (adminAPI) usage(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
	q := r.URL.Query()
	var uq ledger.UsageQuery
	var err error
	if s := q.Get("from"); s != "" {
		if uq.From, err = parseUsageTime(s, false); err != nil {
			return badRequest("from: %v", err)
		}
	}
	if s := q.Get("to"); s != "" {
		if uq.To, err = parseUsageTime(s, true); err != nil {
			return badRequest("to: %v", err)
		}
	}
	if !uq.From.IsZero() && !uq.To.IsZero() && uq.To.Before(uq.From) {
		return badRequest("to (%s) is before from (%s)", q.Get("to"), q.Get("from"))
	}
	if id := q.Get("account"); id != "" {
		acct, err := findAccount(r.Context(), store, id)
		if err != nil {
			return err
		}
		uq.AccountID = acct.ID
	}
	rows, err := store.Usage(r.Context(), uq)
	if err != nil {
		return ledgerError(err, "reading usage")
	}
	rep := summarizeUsage(rows)
	rep.AccountID, rep.From, rep.To = uq.AccountID, q.Get("from"), q.Get("to")
	return writeAdminJSON(w, http.StatusOK, rep)
}

// parseUsageTime reads a day (YYYY-MM-DD, UTC) or an RFC 3339 time. The ledger's upper bound
// is exclusive, so a day as the upper bound becomes the start of the next day: "to" a day
// includes that whole day.
func parseUsageTime(s string, end bool) (time.Time, error) {
	if d, err := time.Parse(time.DateOnly, s); err == nil {
		if end {
			return d.Add(24 * time.Hour), nil
		}
		return d, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither a day (2025-01-31) nor an RFC 3339 time", s)
	}
	return t, nil
}

func summarizeUsage(rows []ledger.UsageRow) usageReport {
	if rows == nil {
		rows = []ledger.UsageRow{}
	}
	sum := func(key func(ledger.UsageRow) usageSum) []usageSum {
		idx := map[usageSum]*usageSum{}
		var order []*usageSum
		for _, row := range rows {
			k := key(row)
			s := idx[k]
			if s == nil {
				s = &usageSum{Day: k.Day, Tool: k.Tool, Mode: k.Mode}
				idx[k] = s
				order = append(order, s)
			}
			s.Requests += row.Requests
			s.Settled += row.Settled
			s.Voided += row.Voided
		}
		out := make([]usageSum, 0, len(order))
		for _, s := range order {
			out = append(out, *s)
		}
		slices.SortFunc(out, func(a, b usageSum) int {
			return strings.Compare(a.Day+"\x00"+a.Tool+"\x00"+string(a.Mode), b.Day+"\x00"+b.Tool+"\x00"+string(b.Mode))
		})
		return out
	}
	return usageReport{
		Rows:   rows,
		ByTool: sum(func(r ledger.UsageRow) usageSum { return usageSum{Tool: r.Tool, Mode: r.Mode} }),
		ByDay:  sum(func(r ledger.UsageRow) usageSum { return usageSum{Day: r.Day, Mode: r.Mode} }),
		Total:  sum(func(r ledger.UsageRow) usageSum { return usageSum{Mode: r.Mode} }),
	}
}

// --- verify and backup ---

func (adminAPI) verify(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
	rep, err := store.Verify(r.Context())
	if err != nil {
		return ledgerError(err, "verifying the ledger")
	}
	if rep.Problems == nil {
		rep.Problems = []ledger.Problem{}
	}
	return writeAdminJSON(w, http.StatusOK, rep)
}

// backupChecksumTrailer carries the SHA-256 of the backup stream, so the client can tell a
// complete download from one cut short.
const backupChecksumTrailer = "X-Textgen-Backup-Sha256"

func (adminAPI) backup(w http.ResponseWriter, r *http.Request, store ledger.Store) error {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="textgen-ledger-%s.backup"`, now().UTC().Format("20060102T150405Z")))
	h.Set("Trailer", backupChecksumTrailer)
	sum := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(w, sum)}
	if err := store.Backup(r.Context(), cw); err != nil {
		if cw.n == 0 {
			h.Del("Content-Disposition")
			h.Del("Trailer")
			return ledgerError(err, "backing up the ledger")
		}
		// The status line is gone: abort the response so that the client sees a broken stream,
		// never a short file that looks complete.
		panic(http.ErrAbortHandler)
	}
	h.Set(backupChecksumTrailer, hex.EncodeToString(sum.Sum(nil)))
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// --- helpers ---

func parseMode(s string) (ledger.Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", string(ledger.Live):
		return ledger.Live, nil
	case string(ledger.Test):
		return ledger.Test, nil
	}
	return "", badRequest("mode: %q is neither %q nor %q", s, ledger.Live, ledger.Test)
}

func pageFromQuery(r *http.Request) (ledger.Page, error) {
	q := r.URL.Query()
	p := ledger.Page{Cursor: q.Get("cursor")}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			return p, badRequest("limit: %q is not a number from 1 to 1000", s)
		}
		p.Limit = n
	}
	return p, nil
}

// decodeAdminJSON reads one JSON object into dst, rejecting unknown fields and trailing data.
// An empty body is accepted when allowEmpty is set.
func decodeAdminJSON(r *http.Request, dst any, allowEmpty bool) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxAdminBody+1))
	if err != nil {
		return badRequest("reading the request body: %v", err)
	}
	if len(body) > maxAdminBody {
		return badRequest("the request body is larger than %d bytes", maxAdminBody)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		if allowEmpty {
			return nil
		}
		return badRequest("the request body must be a JSON object")
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return badRequest("invalid JSON body: %v", err)
	}
	if dec.More() {
		return badRequest("invalid JSON body: data after the object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("invalid JSON body: data after the object")
	}
	return nil
}

func writeAdminJSON(w http.ResponseWriter, status int, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: fmt.Errorf("encoding the response: %w", err)}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err = w.Write(append(body, '\n'))
	if err != nil {
		// The status is sent; nothing better can be done than to log it.
		caddy.Log().Named("admin.api.textgen").Debug("writing the response: " + err.Error())
	}
	return nil
}

func badRequest(format string, args ...any) error {
	return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf(format, args...)}
}

// ledgerError maps a ledger error to its HTTP status, with what was being done as context.
func ledgerError(err error, format string, args ...any) error {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, ledger.ErrDuplicateEmail), errors.Is(err, ledger.ErrAlreadyRevoked),
		errors.Is(err, ledger.ErrInsufficientCredits), errors.Is(err, ledger.ErrAccountDisabled):
		status = http.StatusConflict
	case errors.Is(err, ledger.ErrInvalidArgument):
		status = http.StatusBadRequest
	case errors.Is(err, ledger.ErrClosed):
		status = http.StatusServiceUnavailable
	}
	return caddy.APIError{HTTPStatus: status, Err: fmt.Errorf(format+": %w", append(args, err)...)}
}

// Interface guards
var (
	_ caddy.Module      = (*adminAPI)(nil)
	_ caddy.AdminRouter = (*adminAPI)(nil)
)
