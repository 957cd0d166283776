package account

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

const maxKeyName = 60

type keysData struct {
	Keys     []ledger.Key
	Name     string
	Mode     ledger.Mode
	MaxKeys  int
	Active   int
	Revoked  *ledger.Key
	Created  *ledger.Key
	FullKey  string
	Endpoint string
	// Rolled: FullKey is the new secret of the existing key Created (key_limits.go).
	Rolled bool
}

func (a *app) keys(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	p := sc.page("API keys", "keys")
	d, err := a.keysData(r, sc)
	if err != nil {
		a.internalError(w, r, sc, "listing keys", err)
		return
	}
	if id := r.URL.Query().Get("revoked"); id != "" {
		for i := range d.Keys {
			if d.Keys[i].ID == id && !d.Keys[i].Revoked.IsZero() {
				p.Flash = "The key “" + displayName(d.Keys[i]) + "” is revoked. Requests with it are refused from now on."
			}
		}
	}
	if id := r.URL.Query().Get("saved"); id != "" {
		for i := range d.Keys {
			if d.Keys[i].ID == id {
				p.Flash = "The limits of the key “" + displayName(d.Keys[i]) + "” are saved. They apply from the next request."
			}
		}
	}
	p.Data = d
	a.render(w, r, http.StatusOK, "keys", p)
}

func (a *app) keysData(r *http.Request, sc *sessionCtx) (keysData, error) {
	keys, err := a.store.ListKeys(r.Context(), sc.acct.ID)
	if err != nil {
		return keysData{}, err
	}
	roles, err := a.memberRoles(r.Context(), sc)
	if err != nil {
		return keysData{}, err
	}
	keys = sc.visibleKeys(keys, roles)
	// Newest first; revoked keys after the active ones.
	sorted := make([]ledger.Key, 0, len(keys))
	active := 0
	for i := len(keys) - 1; i >= 0; i-- {
		if keys[i].Revoked.IsZero() {
			sorted = append(sorted, keys[i])
			active++
		}
	}
	for i := len(keys) - 1; i >= 0; i-- {
		if !keys[i].Revoked.IsZero() {
			sorted = append(sorted, keys[i])
		}
	}
	return keysData{Keys: sorted, Mode: ledger.Live, MaxKeys: a.maxKeys, Active: active, Endpoint: a.baseURL(r) + "/api/v1/generate"}, nil
}

func displayName(k ledger.Key) string {
	if k.Name == "" {
		return k.Prefix + "…" + k.Last4
	}
	return k.Name
}

const tooManyKeys = "You have the most active keys allowed. Revoke one you no longer use first."

func (a *app) createKey(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	name := strings.TrimSpace(r.PostFormValue("name"))
	mode := ledger.Mode(r.PostFormValue("mode"))
	d, err := a.keysData(r, sc)
	if err != nil {
		a.internalError(w, r, sc, "listing keys", err)
		return
	}
	d.Name, d.Mode = name, mode
	fail := func(status int, msg string) {
		p := sc.page("API keys", "keys")
		p.Error, p.Data = msg, d
		a.render(w, r, status, "keys", p)
	}
	switch {
	case name == "":
		fail(http.StatusBadRequest, "Give the key a name, for example the program or machine that will use it.")
		return
	case utf8.RuneCountInString(name) > maxKeyName || !utf8.ValidString(name) || strings.ContainsFunc(name, isControl):
		fail(http.StatusBadRequest, "The name must be at most 60 characters of plain text.")
		return
	case mode != ledger.Live && mode != ledger.Test:
		fail(http.StatusBadRequest, "Choose a live key or a test key.")
		return
	case d.Active >= a.maxKeys:
		fail(http.StatusConflict, tooManyKeys)
		return
	}
	// The check above answers the common case with the page as it is; the ledger's cap is what
	// holds when keys are created all at once.
	full, k, err := a.createKeyFor(r.Context(), sc, mode, name)
	if errors.Is(err, ledger.ErrTooManyKeys) {
		fail(http.StatusConflict, tooManyKeys)
		return
	}
	if err != nil {
		a.internalError(w, r, sc, "creating key", err)
		return
	}
	a.logger.Info("API key created", zap.String("account", sc.acct.ID), zap.String("key_id", k.ID), zap.String("mode", string(mode)))
	d, err = a.keysData(r, sc)
	if err != nil {
		a.internalError(w, r, sc, "listing keys", err)
		return
	}
	d.Created, d.FullKey = &k, full
	p := sc.page("Your new API key", "keys")
	p.Data = d
	// The full key is in this response only: no-store (set for every page) keeps it out of
	// caches and the back/forward cache.
	a.render(w, r, http.StatusCreated, "key_created", p)
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// findKey finds one of the account's keys that the session may see. A key it may not see (of
// another account, or of a member the session's role does not reach) is "not found"; one it
// may see but not act on gets allowed false.
func (a *app) findKey(r *http.Request, sc *sessionCtx, id string, act ledger.Action) (k ledger.Key, found, allowed bool, err error) {
	keys, err := a.store.ListKeys(r.Context(), sc.acct.ID)
	if err != nil {
		return ledger.Key{}, false, false, err
	}
	roles, err := a.memberRoles(r.Context(), sc)
	if err != nil {
		return ledger.Key{}, false, false, err
	}
	for _, k := range keys {
		if k.ID == id && sc.mayKey(k, roles, ledger.ActKeySee) {
			return k, true, sc.mayKey(k, roles, act), nil
		}
	}
	return ledger.Key{}, false, false, nil
}

// keyFor finds key id for act, answering the request itself unless the session may do act to
// it: 404 for a key it may not see (another member's key looks exactly like a key that does
// not exist), 403 for one it may see but not act on.
func (a *app) keyFor(w http.ResponseWriter, r *http.Request, sc *sessionCtx, id string, act ledger.Action) (ledger.Key, bool) {
	k, found, allowed, err := a.findKey(r, sc, id, act)
	switch {
	case err != nil:
		a.internalError(w, r, sc, "finding key", err)
		return k, false
	case !found:
		a.logger.Info("refused a key action: a key the member may not see, or an unknown key",
			zap.String("account", sc.acct.ID), zap.String("login", sc.login.ID), zap.String("action", string(act)))
		a.errorPage(w, r, sc, http.StatusNotFound, "Key not found", "You have no key with this id.")
		return k, false
	case !allowed:
		a.logger.Info("refused a key action above the member's role", zap.String("account", sc.acct.ID),
			zap.String("login", sc.login.ID), zap.String("key_id", k.ID), zap.String("action", string(act)))
		msg := "Your role in this organisation (" + string(sc.role) + ") does not allow this on this key."
		if act == ledger.ActKeyRoll {
			msg = "Only the member this key belongs to can roll it: its new secret is shown to them alone. You can revoke it."
		}
		a.errorPage(w, r, sc, http.StatusForbidden, "Not allowed", msg)
		return k, false
	}
	return k, true
}

func (a *app) revokeConfirm(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	k, ok := a.keyFor(w, r, sc, r.URL.Query().Get("id"), ledger.ActKeyRevoke)
	if !ok {
		return
	}
	if !k.Revoked.IsZero() {
		http.Redirect(w, r, a.prefix+"/keys?revoked="+url.QueryEscape(k.ID), http.StatusSeeOther)
		return
	}
	p := sc.page("Revoke key", "keys")
	p.Data = k
	a.render(w, r, http.StatusOK, "revoke", p)
}

func (a *app) revokeKey(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	id := r.PostFormValue("id")
	if _, ok := a.keyFor(w, r, sc, id, ledger.ActKeyRevoke); !ok {
		return
	}
	k, err := a.store.RevokeKey(r.Context(), sc.acct.ID, id)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		// Someone else's key looks exactly like a key that does not exist.
		a.logger.Info("refused to revoke a key of another account or an unknown key", zap.String("account", sc.acct.ID))
		a.errorPage(w, r, sc, http.StatusNotFound, "Key not found", "You have no key with this id.")
		return
	case errors.Is(err, ledger.ErrAlreadyRevoked):
	case err != nil:
		a.internalError(w, r, sc, "revoking key", err)
		return
	default:
		a.logger.Info("API key revoked", zap.String("account", sc.acct.ID), zap.String("key_id", k.ID))
	}
	http.Redirect(w, r, a.prefix+"/keys?revoked="+url.QueryEscape(id), http.StatusSeeOther)
}

// baseURL is the public scheme and host: the configured one, else the request's.
func (a *app) baseURL(r *http.Request) string {
	if a.publicURL != "" {
		return a.publicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}
