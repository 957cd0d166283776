package account

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// Organisations in My Account. A person logs in with their own account (its e-mail and
// password) and acts either in it or in an organisation they are an accepted member of, chosen
// on the Organisation page and remembered in a cookie next to the session's. The cookie only
// names the organisation: every request checks again that the login is a member of it
// (actAs), so a removed member is back in their own account at their next click, and the role
// that request may use is the one the ledger has now. Every action checks that role on the
// server (needs), whatever the page showed.
//
// Roles: owner (buying credits, members, caps, everything), admin (members and every key),
// member (their own keys and their own use). A personal account's login is its owner.

// orgCookie is the name of the cookie that remembers the organisation chosen.
func (a *app) orgCookie() string { return a.cookieName + "_org" }

// rank orders the roles: an action that needs a role is open to it and the roles above.
func rank(r ledger.Role) int {
	switch r {
	case ledger.RoleOwner:
		return 3
	case ledger.RoleAdmin:
		return 2
	case ledger.RoleMember:
		return 1
	}
	return 0
}

// actAs sets what the session acts on: the organisation its cookie names, if the login is an
// accepted member of it now, else the login's own account. It answers the request itself and
// returns false on a ledger failure.
func (a *app) actAs(w http.ResponseWriter, r *http.Request, sc *sessionCtx) bool {
	sc.login, sc.role = sc.acct, ledger.RoleOwner
	ctx := r.Context()
	if c, err := r.Cookie(a.orgCookie()); err == nil && c.Value != "" && c.Value != sc.login.ID {
		m, err := a.store.GetMembership(ctx, c.Value, sc.login.ID)
		if err == nil && !m.Pending {
			org, err := a.store.GetAccount(ctx, c.Value)
			if err == nil {
				sc.acct, sc.role, sc.inOrg = org, m.Role, true
				return true
			}
			if !errors.Is(err, ledger.ErrNotFound) {
				a.internalError(w, r, sc, "loading the organisation", err)
				return false
			}
		} else if err != nil && !errors.Is(err, ledger.ErrNotMember) {
			a.internalError(w, r, sc, "checking a membership", err)
			return false
		}
		// No longer a member (or never was): back to the login's own account.
		a.clearCookie(w, r, a.orgCookie())
	}
	m, err := a.store.GetMembership(ctx, sc.login.ID, sc.login.ID)
	switch {
	case err == nil:
		sc.role, sc.inOrg = m.Role, true
	case !errors.Is(err, ledger.ErrNotMember):
		a.internalError(w, r, sc, "checking a membership", err)
		return false
	}
	return true
}

// needs refuses the request unless the session's role in the account it acts on is min or
// above.
func (a *app) needs(min ledger.Role, f func(http.ResponseWriter, *http.Request, *sessionCtx)) func(http.ResponseWriter, *http.Request, *sessionCtx) {
	return func(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
		if rank(sc.role) < rank(min) {
			a.logger.Info("refused an action above the member's role", zap.String("account", sc.acct.ID),
				zap.String("login", sc.login.ID), zap.String("role", string(sc.role)), zap.String("path", r.URL.Path))
			a.errorPage(w, r, sc, http.StatusForbidden, "Not allowed",
				"Your role in this organisation ("+string(sc.role)+") does not allow this. Ask one of its owners.")
			return
		}
		f(w, r, sc)
	}
}

// ownDashboard shows a member (who sees only their own keys and use) the Organisation page
// instead of the organisation's dashboard of credits and purchases.
func (a *app) ownDashboard(f func(http.ResponseWriter, *http.Request, *sessionCtx)) func(http.ResponseWriter, *http.Request, *sessionCtx) {
	return func(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
		if rank(sc.role) < rank(ledger.RoleAdmin) {
			http.Redirect(w, r, a.prefix+"/org", http.StatusSeeOther)
			return
		}
		f(w, r, sc)
	}
}

// keyRoles are the roles of an organisation's accepted members, by member id, for deciding what
// the session may do to whose key (ledger.Allowed); nil for a personal account, whose keys are
// all its login's.
type keyRoles map[string]ledger.Role

// memberRoles loads the roles of the members of the account the session acts in.
func (a *app) memberRoles(ctx context.Context, sc *sessionCtx) (keyRoles, error) {
	if !sc.inOrg {
		return nil, nil
	}
	ms, err := a.store.ListMembers(ctx, sc.acct.ID)
	if err != nil {
		return nil, err
	}
	roles := make(keyRoles, len(ms))
	for _, m := range ms {
		if !m.Pending {
			roles[m.MemberID] = m.Role
		}
	}
	return roles, nil
}

// mayKey reports whether the session may do act to key k, by the organisation's one rule
// (ledger.Allowed): everyone everything to their own keys; owners see, limit, rename and revoke
// every key, admins those of members below them; nobody rolls a key that is not theirs.
func (sc *sessionCtx) mayKey(k ledger.Key, roles keyRoles, act ledger.Action) bool {
	holder := ledger.KeyMember(k)
	return ledger.Allowed(sc.role, holder == sc.login.ID, roles[holder], act)
}

// visibleKeys is the keys the session may see.
func (sc *sessionCtx) visibleKeys(keys []ledger.Key, roles keyRoles) []ledger.Key {
	out := keys[:0:0]
	for _, k := range keys {
		if sc.mayKey(k, roles, ledger.ActKeySee) {
			out = append(out, k)
		}
	}
	return out
}

// orgRoutes registers the Organisation page and its forms.
func (a *app) orgRoutes(m *http.ServeMux) {
	p := a.prefix
	m.HandleFunc("GET "+p+"/org", a.authed(a.orgPage))
	m.HandleFunc("POST "+p+"/org/switch", a.authedPost(a.orgSwitch))
	m.HandleFunc("POST "+p+"/org/create", a.authedPost(a.needs(ledger.RoleOwner, a.orgCreate)))
	m.HandleFunc("POST "+p+"/org/accept", a.authedPost(a.orgAccept))
	m.HandleFunc("POST "+p+"/org/leave", a.authedPost(a.orgLeave))
	m.HandleFunc("POST "+p+"/org/invite", a.authedPost(a.verifiedFor(always, a.needs(ledger.RoleAdmin, a.orgInvite))))
	m.HandleFunc("POST "+p+"/org/remove", a.authedPost(a.needs(ledger.RoleAdmin, a.orgRemove)))
	m.HandleFunc("POST "+p+"/org/role", a.authedPost(a.needs(ledger.RoleOwner, a.orgRole)))
	m.HandleFunc("POST "+p+"/org/cap", a.authedPost(a.needs(ledger.RoleOwner, a.orgCap)))
	m.HandleFunc("GET "+p+"/members.csv", a.authed(a.needs(ledger.RoleAdmin, a.exportMembersCSV)))
}

// orgData is what the Organisation page shows.
type orgData struct {
	InOrg   bool
	Role    ledger.Role
	Self    ledger.Membership   // the login's membership of the account acted on
	Members []ledger.Membership // for admins and owners
	Mine    []ledger.Membership // the login's organisations and invitations, to switch or accept
	Acting  string              // the account acted on
	LoginID string
	Month   string
	Owner   bool
	Admin   bool
	// Removable: the members the session may remove (ledger.ActMemberRemove), by member id.
	Removable map[string]bool
}

func (a *app) orgPage(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	a.renderOrg(w, r, sc, http.StatusOK, "")
}

func (a *app) renderOrg(w http.ResponseWriter, r *http.Request, sc *sessionCtx, status int, formErr string) {
	ctx := r.Context()
	d := orgData{InOrg: sc.inOrg, Role: sc.role, Acting: sc.acct.ID, LoginID: sc.login.ID, Month: ledger.MonthOf(now()),
		Owner: sc.role == ledger.RoleOwner, Admin: rank(sc.role) >= rank(ledger.RoleAdmin)}
	var err error
	if d.Mine, err = a.store.MembershipsOf(ctx, sc.login.ID); err != nil {
		a.internalError(w, r, sc, "listing memberships", err)
		return
	}
	if sc.inOrg {
		ms, err := a.store.ListMembers(ctx, sc.acct.ID)
		if err != nil {
			a.internalError(w, r, sc, "listing members", err)
			return
		}
		for _, m := range ms {
			if m.MemberID == sc.login.ID {
				d.Self = m
			}
		}
		if d.Admin {
			d.Members = ms
			d.Removable = map[string]bool{}
			for _, m := range ms {
				d.Removable[m.MemberID] = m.MemberID != sc.acct.ID && ledger.Allowed(sc.role, m.MemberID == sc.login.ID, m.Role, ledger.ActMemberRemove)
			}
		}
	}
	p := sc.page("Organisation", "org")
	p.Data, p.Error = d, formErr
	switch r.URL.Query().Get("done") {
	case "invited":
		p.Flash = "The invitation is on its way."
	case "removed":
		p.Flash = "The member is removed; their keys of this organisation no longer work."
	case "saved":
		p.Flash = "Saved."
	case "created":
		p.Flash = "This account is now an organisation, and you are its owner. Invite members below."
	case "switched":
		p.Flash = "You are now working in " + sc.acct.Email + "."
	case "left":
		p.Flash = "You left the organisation."
	}
	a.render(w, r, status, "org", p)
}

func (a *app) orgDone(w http.ResponseWriter, r *http.Request, what string) {
	http.Redirect(w, r, a.prefix+"/org?done="+what, http.StatusSeeOther)
}

// orgSwitch chooses the account to act in: "" (or the login's own id) for the login's own
// account, else an organisation the login is an accepted member of.
func (a *app) orgSwitch(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	org := r.PostFormValue("org")
	if org == "" || org == sc.login.ID {
		a.clearCookie(w, r, a.orgCookie())
		a.orgDone(w, r, "switched")
		return
	}
	m, err := a.store.GetMembership(r.Context(), org, sc.login.ID)
	if errors.Is(err, ledger.ErrNotMember) || (err == nil && m.Pending) {
		a.errorPage(w, r, sc, http.StatusForbidden, "Not a member", "You are not a member of this organisation.")
		return
	}
	if err != nil {
		a.internalError(w, r, sc, "checking a membership", err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: a.orgCookie(), Value: org, Path: a.prefix, MaxAge: int(a.sessionLifetime.Seconds()),
		HttpOnly: true, Secure: a.secure(r), SameSite: http.SameSiteLaxMode})
	a.orgDone(w, r, "switched")
}

// orgCreate makes the login's own (personal) account an organisation.
func (a *app) orgCreate(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	if sc.acct.ID != sc.login.ID {
		a.errorPage(w, r, sc, http.StatusBadRequest, "Already an organisation", "Switch to your own account first.")
		return
	}
	if _, err := a.store.MakeOrganisation(r.Context(), sc.login.ID); err != nil {
		a.internalError(w, r, sc, "making an organisation", err)
		return
	}
	a.logger.Info("account made an organisation", zap.String("account", sc.login.ID))
	a.orgDone(w, r, "created")
}

// orgAccept accepts an invitation of the login's.
func (a *app) orgAccept(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	org := r.PostFormValue("org")
	if _, err := a.store.AcceptMembership(r.Context(), org, sc.login.ID); errors.Is(err, ledger.ErrNotMember) {
		a.errorPage(w, r, sc, http.StatusNotFound, "No invitation", "There is no invitation of yours to this organisation.")
		return
	} else if err != nil {
		a.internalError(w, r, sc, "accepting an invitation", err)
		return
	}
	a.logger.Info("invitation accepted", zap.String("account", org), zap.String("member", sc.login.ID))
	a.orgDone(w, r, "saved")
}

// memberError answers a refused change of a member with the reason, on the page.
func (a *app) memberError(w http.ResponseWriter, r *http.Request, sc *sessionCtx, err error) {
	switch {
	case errors.Is(err, ledger.ErrLastOwner):
		a.renderOrg(w, r, sc, http.StatusConflict, "An organisation needs an owner: make another member an owner first.")
	case errors.Is(err, ledger.ErrNotMember):
		a.renderOrg(w, r, sc, http.StatusNotFound, "This person is not a member of the organisation.")
	case errors.Is(err, ledger.ErrAlreadyMember):
		a.renderOrg(w, r, sc, http.StatusConflict, "This person is a member, or invited, already.")
	case errors.Is(err, ledger.ErrInvalidArgument):
		a.renderOrg(w, r, sc, http.StatusBadRequest, "The organisation's own login stays its member.")
	default:
		a.internalError(w, r, sc, "changing a member", err)
	}
}

// orgLeave takes the login out of the organisation it acts in (their keys of it are revoked).
func (a *app) orgLeave(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	org := r.PostFormValue("org")
	if _, err := a.store.RemoveMember(r.Context(), org, sc.login.ID); err != nil {
		a.memberError(w, r, sc, err)
		return
	}
	a.logger.Info("member left", zap.String("account", org), zap.String("member", sc.login.ID))
	a.clearCookie(w, r, a.orgCookie())
	a.orgDone(w, r, "left")
}

// targetMember reads the form's member and checks that the session may do act to them
// (ledger.Allowed): an admin changes no owner and no other admin.
func (a *app) targetMember(w http.ResponseWriter, r *http.Request, sc *sessionCtx, act ledger.Action) (ledger.Membership, bool) {
	m, err := a.store.GetMembership(r.Context(), sc.acct.ID, r.PostFormValue("member"))
	if err != nil {
		a.memberError(w, r, sc, err)
		return m, false
	}
	if !ledger.Allowed(sc.role, m.MemberID == sc.login.ID, m.Role, act) {
		a.logger.Info("refused a member action above the member's role", zap.String("account", sc.acct.ID),
			zap.String("login", sc.login.ID), zap.String("member", m.MemberID), zap.String("action", string(act)))
		a.renderOrg(w, r, sc, http.StatusForbidden, "Only an owner can change an owner or an admin.")
		return m, false
	}
	return m, true
}

func (a *app) orgRemove(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	m, ok := a.targetMember(w, r, sc, ledger.ActMemberRemove)
	if !ok {
		return
	}
	keys, err := a.store.RemoveMember(r.Context(), sc.acct.ID, m.MemberID)
	if err != nil {
		a.memberError(w, r, sc, err)
		return
	}
	a.logger.Info("member removed", zap.String("account", sc.acct.ID), zap.String("member", m.MemberID),
		zap.String("by", sc.login.ID), zap.Int("keys_revoked", len(keys)))
	a.orgDone(w, r, "removed")
}

func (a *app) orgRole(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	m, ok := a.targetMember(w, r, sc, ledger.ActMemberRole)
	if !ok {
		return
	}
	role := ledger.Role(r.PostFormValue("role"))
	if rank(role) == 0 {
		a.renderOrg(w, r, sc, http.StatusBadRequest, "Choose owner, admin or member.")
		return
	}
	if _, err := a.store.SetMemberRole(r.Context(), sc.acct.ID, m.MemberID, role); err != nil {
		a.memberError(w, r, sc, err)
		return
	}
	a.logger.Info("member role set", zap.String("account", sc.acct.ID), zap.String("member", m.MemberID), zap.String("role", string(role)))
	a.orgDone(w, r, "saved")
}

func (a *app) orgCap(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	m, ok := a.targetMember(w, r, sc, ledger.ActMemberCap)
	if !ok {
		return
	}
	v := strings.TrimSpace(r.PostFormValue("cap"))
	n, err := strconv.ParseInt(v, 10, 64)
	if v == "" {
		n, err = 0, nil
	}
	if err != nil || n < 0 || n > 1_000_000_000 {
		a.renderOrg(w, r, sc, http.StatusBadRequest, "Enter a whole number of credits from 0 (no cap) to 1000000000.")
		return
	}
	if _, err := a.store.SetMemberCap(r.Context(), sc.acct.ID, m.MemberID, n); err != nil {
		a.memberError(w, r, sc, err)
		return
	}
	a.logger.Info("member cap set", zap.String("account", sc.acct.ID), zap.String("member", m.MemberID), zap.Int64("cap", n))
	a.orgDone(w, r, "saved")
}

// orgInvite invites an address: a login that exists is asked to accept on its Organisation
// page; an address without one gets an account and the invitation link that sets its password
// (invite.go), and accepts once logged in.
func (a *app) orgInvite(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	ctx := r.Context()
	email := strings.TrimSpace(r.PostFormValue("email"))
	role := ledger.Role(r.PostFormValue("role"))
	if rank(role) == 0 {
		role = ledger.RoleMember
	}
	if !ledger.Allowed(sc.role, false, role, ledger.ActMemberInvite) {
		a.renderOrg(w, r, sc, http.StatusForbidden, "Only an owner can invite an owner or an admin.")
		return
	}
	if !sc.inOrg {
		a.renderOrg(w, r, sc, http.StatusConflict, "Make this account an organisation first.")
		return
	}
	invitee, err := a.store.GetAccountByEmail(ctx, email)
	fresh := false
	if errors.Is(err, ledger.ErrNotFound) {
		invitee, err = a.store.CreateAccount(ctx, email)
		fresh = err == nil
	}
	if errors.Is(err, ledger.ErrInvalidArgument) {
		a.renderOrg(w, r, sc, http.StatusBadRequest, "Enter a valid e-mail address.")
		return
	}
	if err != nil {
		a.internalError(w, r, sc, "finding the invitee", err)
		return
	}
	if _, err := a.store.AddMember(ctx, sc.acct.ID, invitee.ID, role, true); err != nil {
		a.memberError(w, r, sc, err)
		return
	}
	switch {
	case a.mail == nil:
		// No e-mail: the invitee accepts on their Organisation page once they log in.
	case fresh:
		if _, _, err = a.Invite(ctx, invitee.ID); err != nil {
			a.internalError(w, r, sc, "sending the invitation", err)
			return
		}
	default:
		if err = a.queueMail(ctx, invitee, "org_invite", mailData{Link: a.publicURL + a.prefix + "/org", Reason: sc.acct.Email}); err != nil {
			a.internalError(w, r, sc, "sending the invitation", err)
			return
		}
	}
	a.logger.Info("member invited", zap.String("account", sc.acct.ID), zap.String("member", invitee.ID),
		zap.String("role", string(role)), zap.Bool("new_login", fresh))
	http.Redirect(w, r, a.prefix+"/org?done=invited&to="+url.QueryEscape(invitee.ID), http.StatusSeeOther)
}
