// Package operator is caddy-textgen's operator interface: the admin API module
// admin.api.textgen (module.go and one file per resource) and the "caddy textgen ..." commands
// (cli*.go) that call it through client.go. It reaches the ledger only through the shared pool
// of caddymodule/internal/textgenapp, never by opening a directory itself.
package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
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
// textgen app opens it in (textgenapp.OpenLedgers), so it loads, and answers 503, even when the
// config has no textgen handler.
//
// Every route takes and returns JSON (except the backup download). Errors are caddy.APIError,
// which Caddy writes as {"error": "<message>"}.
//
//	GET  /textgen/ledgers                                  the ledger directories open in this process
//	POST /textgen/accounts                                 {"email"} → the account (201)
//	GET  /textgen/accounts?cursor=&limit=                  {"accounts", "next_cursor"}
//	GET  /textgen/accounts/{id}                            the account with its balance, keys and disputes ("disputed": one open or lost)
//	POST /textgen/accounts/{id}/disable                    the account
//	POST /textgen/accounts/{id}/enable                     the account
//	POST /textgen/accounts/{id}/invite                     {"link", "mailed", ...}: the password link, e-mailed by My Account
//	POST /textgen/accounts/{id}/keys                       {"mode", "name", "expires"} → the key, with the full "key" (201)
//	GET  /textgen/accounts/{id}/keys                       {"keys"}
//	POST /textgen/accounts/{id}/keys/{kid}/revoke          the key, "revoked": true
//	POST /textgen/accounts/{id}/credits                    {"credits", "reference", "mode"} → grant result
//	POST /textgen/accounts/{id}/adjust                     {"credits", "reason", "reference", "mode"} → adjustment result
//	GET  /textgen/accounts/{id}/balance                    ledger.Balance
//	GET  /textgen/accounts/{id}/ledger?cursor=&limit=      {"entries", "next_cursor"}
//	GET  /textgen/usage?account=&from=&to=                 requests and credits per tool and per day;
//	                                                       from/to: a day (UTC; "to" includes it) or an RFC 3339 time ("to" excluded)
//	GET  /textgen/payments?all=&limit=                     {"payments", "open_only", "reversals"}: paid sessions that credited nothing, newest first; refunds and disputes
//	POST /textgen/payments/{reference}/resolve             {"note"} → {"payment", "repeated"}
//	POST /textgen/payments/{reference}/refund              {"amount_cents", "reason"} → {"reversal", "payment", "entry", "balance", "repeated"}
//	GET  /textgen/mail?limit=                              {"messages"}: the e-mail waiting to go out, oldest first
//	POST /textgen/mail/{id}/drop                           {"dropped": id}: gives up on a queued e-mail
//	GET  /textgen/ledger/verify?progress=                  ledger.VerifyReport (200 also when not ok); with progress=1s, JSON lines (reports.go)
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

// now is the clock of key expiry and backup names; tests may replace it.
var now = time.Now

// adminErrKey carries a pointer to the route's error through the inner ServeMux, whose handlers
// cannot return one.
type adminErrKey struct{}

// adminFunc is one route: the selected ledger is passed in; errors are returned, not written.
type adminFunc func(w http.ResponseWriter, r *http.Request, store operatorLedger) error

// Routes returns the single /textgen/ route; an inner ServeMux with method and wildcard
// patterns dispatches below it.
func (a adminAPI) Routes() []caddy.AdminRoute {
	mux := http.NewServeMux()
	// serve registers a route whose error goes back to the admin handler through the slot.
	serve := func(pattern string, f func(http.ResponseWriter, *http.Request) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			err := f(w, r)
			if slot, _ := r.Context().Value(adminErrKey{}).(*error); slot != nil {
				*slot = err
			}
		})
	}
	handle := func(pattern string, f adminFunc) {
		serve(pattern, func(w http.ResponseWriter, r *http.Request) error { return a.withLedger(w, r, f) })
	}
	serve("GET /textgen/ledgers", func(w http.ResponseWriter, _ *http.Request) error {
		dirs := openLedgerDirs()
		if dirs == nil {
			dirs = []string{}
		}
		return writeAdminJSON(w, http.StatusOK, map[string]any{"ledgers": dirs})
	})
	handle("POST /textgen/accounts", a.createAccount)
	handle("GET /textgen/accounts", a.listAccounts)
	handle("GET /textgen/accounts/{id}", a.getAccount)
	handle("POST /textgen/accounts/{id}/disable", a.setStatus(ledger.StatusDisabled))
	handle("POST /textgen/accounts/{id}/enable", a.setStatus(ledger.StatusActive))
	handle("POST /textgen/accounts/{id}/invite", a.invite)
	handle("POST /textgen/accounts/{id}/keys", a.createKey)
	handle("GET /textgen/accounts/{id}/keys", a.listKeys)
	handle("POST /textgen/accounts/{id}/keys/{kid}/revoke", a.revokeKey)
	handle("POST /textgen/accounts/{id}/keys/{kid}/limits", a.setKeyLimits) // key_limits.go
	handle("POST /textgen/accounts/{id}/keys/{kid}/roll", a.rollKey)
	handle("POST /textgen/accounts/{id}/credits", a.grant)
	handle("POST /textgen/accounts/{id}/adjust", a.adjust)
	handle("GET /textgen/accounts/{id}/balance", a.balance)
	handle("GET /textgen/accounts/{id}/ledger", a.history)
	handle("GET /textgen/accounts/{id}/members", a.listMembers)
	handle("GET /textgen/accounts/{id}/members/usage", a.memberUsageOf)
	handle("POST /textgen/accounts/{id}/organisation", a.makeOrganisation)
	handle("POST /textgen/accounts/{id}/members", a.addMember)
	handle("POST /textgen/accounts/{id}/members/{mid}/remove", a.removeMember)
	handle("POST /textgen/accounts/{id}/members/{mid}/role", a.setMemberRole)
	handle("POST /textgen/accounts/{id}/members/{mid}/cap", a.setMemberCap)
	handle("GET /textgen/accounts/{id}/alerts", a.listAlerts) // alerts.go
	handle("POST /textgen/accounts/{id}/alerts", a.createAlertEndpoint)
	handle("POST /textgen/accounts/{id}/alerts/{eid}/delete", a.deleteAlertEndpoint)
	handle("GET /textgen/usage", a.usage)
	handle("GET /textgen/accounts/{id}/usage/keys", a.usageByKey)
	handle("GET /textgen/payments", a.listPayments)
	handle("POST /textgen/payments/{reference}/resolve", a.resolvePayment)
	handle("POST /textgen/payments/{reference}/refund", a.refund)
	handle("GET /textgen/mail", a.listMail)
	handle("POST /textgen/mail/{id}/drop", a.dropMail)
	handle("GET /textgen/operators", a.listOperators)
	handle("POST /textgen/operators", a.createOperator)
	handle("POST /textgen/operators/{id}/remove", a.removeOperator)
	handle("POST /textgen/codes", a.createCode) // codes.go
	handle("GET /textgen/codes", a.listCodes)
	handle("POST /textgen/codes/{id}/disable", a.disableCode)
	handle("GET /textgen/codes/{id}/redemptions", a.codeRedemptions)
	handle("GET /textgen/ledger/verify", a.verify)
	handle("GET /textgen/backup", a.backup)
	handle("GET /textgen/receipts/keys", a.receiptKeys)
	handle("POST /textgen/receipts/rotate-key", a.rotateReceiptKey)
	serve(adminPrefix, func(w http.ResponseWriter, r *http.Request) error { return unknownRoute(mux, w, r) })

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
func selectLedger(dir string) (operatorLedger, error) {
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
		if key, err := textgenapp.LedgerKey(dir); err == nil {
			if b, ok := open[key]; ok {
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
	var only operatorLedger
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

// Interface guards
var (
	_ caddy.Module      = (*adminAPI)(nil)
	_ caddy.AdminRouter = (*adminAPI)(nil)
)
