package operator

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/ledger"
)

// Organisations through the admin API: an account's members (GET), the account made an
// organisation, a member added or removed, a member's role or monthly cap, and usage by member.
// The routes are under /textgen/accounts/{id}, the organisation's account id.

// memberList is the answer of GET /textgen/accounts/{id}/members.
type memberList struct {
	AccountID string `json:"account_id"`
	// Organisation is false for a personal account (no members).
	Organisation bool                `json:"organisation"`
	Members      []ledger.Membership `json:"members"`
}

// addMemberRequest is the body of POST /textgen/accounts/{id}/members.
type addMemberRequest struct {
	// Member is the id of the member's own account (its login).
	Member string      `json:"member"`
	Role   ledger.Role `json:"role"`
}

// roleRequest and capRequest are the bodies of .../members/{mid}/role and .../members/{mid}/cap.
type roleRequest struct {
	Role ledger.Role `json:"role"`
}

type capRequest struct {
	// MonthlyCap is the most live credits the member's keys may take in one UTC month; 0: none.
	MonthlyCap *int64 `json:"monthly_cap"`
}

// removedMember is the answer of POST .../members/{mid}/remove.
type removedMember struct {
	AccountID   string    `json:"account_id"`
	MemberID    string    `json:"member_id"`
	RevokedKeys []keyView `json:"revoked_keys"`
}

// memberUsage is the answer of GET /textgen/accounts/{id}/members/usage.
type memberUsage struct {
	AccountID string               `json:"account_id"`
	From      string               `json:"from"`
	To        string               `json:"to"`
	Usage     []ledger.MemberMonth `json:"usage"`
}

// memberError maps the ledger's membership errors to the admin API's statuses.
func memberError(err error, format string, args ...any) error {
	switch {
	case errors.Is(err, ledger.ErrNotMember):
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf(format+": %w", append(args, err)...)}
	case errors.Is(err, ledger.ErrLastOwner), errors.Is(err, ledger.ErrAlreadyMember), errors.Is(err, ledger.ErrNotOrganisation):
		return caddy.APIError{HTTPStatus: http.StatusConflict, Err: fmt.Errorf(format+": %w", append(args, err)...)}
	}
	return ledgerError(err, format, args...)
}

func (adminAPI) listMembers(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	id := r.PathValue("id")
	ms, err := store.ListMembers(r.Context(), id)
	if err != nil {
		return accountError(err, id, "listing the members of %s", id)
	}
	if ms == nil {
		ms = []ledger.Membership{}
	}
	return writeAdminJSON(w, http.StatusOK, memberList{AccountID: id, Organisation: len(ms) > 0, Members: ms})
}

func (adminAPI) makeOrganisation(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	if err := decodeAdminJSON(r, &struct{}{}, true); err != nil {
		return err
	}
	id := r.PathValue("id")
	err := audited(r.Context(), store, "organisation", id, "", "", func() error {
		_, err := store.MakeOrganisation(r.Context(), id)
		return err
	})
	if err != nil {
		return accountError(err, id, "making %s an organisation", id)
	}
	ms, err := store.ListMembers(r.Context(), id)
	if err != nil {
		return accountError(err, id, "listing the members of %s", id)
	}
	return writeAdminJSON(w, http.StatusOK, memberList{AccountID: id, Organisation: true, Members: ms})
}

func (adminAPI) addMember(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var req addMemberRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	if req.Member == "" {
		return badRequest("member is required: the id of the member's own account")
	}
	if req.Role == "" {
		req.Role = ledger.RoleMember
	}
	id := r.PathValue("id")
	var m ledger.Membership
	err := audited(r.Context(), store, "member.add", id, fmt.Sprintf("member %s as %s", req.Member, req.Role), "", func() (err error) {
		m, err = store.AddMember(r.Context(), id, req.Member, req.Role, false)
		return err
	})
	if err != nil {
		return memberError(err, "adding %s to %s", req.Member, id)
	}
	return writeAdminJSON(w, http.StatusOK, m)
}

func (adminAPI) removeMember(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	if err := decodeAdminJSON(r, &struct{}{}, true); err != nil {
		return err
	}
	id, mid := r.PathValue("id"), r.PathValue("mid")
	var keys []ledger.Key
	err := audited(r.Context(), store, "member.remove", id, "member "+mid, "", func() (err error) {
		keys, err = store.RemoveMember(r.Context(), id, mid)
		return err
	})
	if err != nil {
		return memberError(err, "removing %s from %s", mid, id)
	}
	out := removedMember{AccountID: id, MemberID: mid, RevokedKeys: []keyView{}}
	for _, k := range keys {
		out.RevokedKeys = append(out.RevokedKeys, newKeyView(k))
	}
	return writeAdminJSON(w, http.StatusOK, out)
}

func (adminAPI) setMemberRole(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var req roleRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	id, mid := r.PathValue("id"), r.PathValue("mid")
	var m ledger.Membership
	err := audited(r.Context(), store, "member.role", id, fmt.Sprintf("member %s as %s", mid, req.Role), "", func() (err error) {
		m, err = store.SetMemberRole(r.Context(), id, mid, req.Role)
		return err
	})
	if err != nil {
		return memberError(err, "setting the role of %s in %s", mid, id)
	}
	return writeAdminJSON(w, http.StatusOK, m)
}

func (adminAPI) setMemberCap(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var req capRequest
	if err := decodeAdminJSON(r, &req, false); err != nil {
		return err
	}
	if req.MonthlyCap == nil {
		return badRequest("monthly_cap is required (0: no cap)")
	}
	id, mid := r.PathValue("id"), r.PathValue("mid")
	var m ledger.Membership
	err := audited(r.Context(), store, "member.cap", id, fmt.Sprintf("member %s, monthly cap %d", mid, *req.MonthlyCap), "", func() (err error) {
		m, err = store.SetMemberCap(r.Context(), id, mid, *req.MonthlyCap)
		return err
	})
	if err != nil {
		return memberError(err, "setting the cap of %s in %s", mid, id)
	}
	return writeAdminJSON(w, http.StatusOK, m)
}

// memberUsageOf answers GET /textgen/accounts/{id}/members/usage?from=YYYY-MM&to=YYYY-MM
// (default: this UTC month).
func (adminAPI) memberUsageOf(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	id := r.PathValue("id")
	month := ledger.MonthOf(time.Now())
	from, to := r.URL.Query().Get("from"), r.URL.Query().Get("to")
	if from == "" {
		from = month
	}
	if to == "" {
		to = max(from, month)
	}
	u, err := store.MemberUsage(r.Context(), id, from, to)
	if err != nil {
		return accountError(err, id, "reading the usage of %s by member", id)
	}
	return writeAdminJSON(w, http.StatusOK, memberUsage{AccountID: id, From: from, To: to, Usage: u})
}
