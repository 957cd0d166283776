package account

import (
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// Usage by member: the credits each member's keys took in each UTC month (ledger.MemberUsage),
// on the Organisation page (this month) and as CSV (the last 12 months), and the keys a member
// makes in an organisation, which record who made them.

// memberCSVMonths is how many months the CSV covers, this one included.
const memberCSVMonths = 12

// exportMembersCSV writes month, member, e-mail and credits, oldest month first.
func (a *app) exportMembersCSV(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	t := now().UTC()
	from := time.Date(t.Year(), t.Month()-memberCSVMonths+1, 1, 0, 0, 0, 0, time.UTC)
	rows, err := a.store.MemberUsage(r.Context(), sc.acct.ID, ledger.MonthOf(from), ledger.MonthOf(t))
	if err != nil {
		a.internalError(w, r, sc, "reading usage by member", err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/csv; charset=utf-8")
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="usage-by-member-%s.csv"`, t.Format("2006-01-02")))
	cw := csv.NewWriter(w)
	cw.Write([]string{"month", "member_id", "email", "credits"})
	for _, u := range rows {
		cw.Write([]string{u.Month, u.MemberID, u.Email, strconv.FormatInt(u.Credits, 10)})
	}
	cw.Flush()
}

// createKeyFor makes a key of the account the session acts in: in an organisation, a key of
// the login as its member (so that removing the member revokes it and their cap counts it).
func (a *app) createKeyFor(ctx context.Context, sc *sessionCtx, mode ledger.Mode, name string) (string, ledger.Key, error) {
	if !sc.inOrg {
		return a.store.CreateKeyCapped(ctx, sc.acct.ID, mode, name, time.Time{}, a.maxKeys)
	}
	return a.store.CreateMemberKey(ctx, sc.acct.ID, sc.login.ID, mode, name, time.Time{}, a.maxKeys)
}

// usageByMember is the dashboard's use this month by member: an organisation's members, for
// the admins and owners who see the dashboard; nil for a personal account.
func (a *app) usageByMember(ctx context.Context, sc *sessionCtx) ([]ledger.Membership, error) {
	if !sc.inOrg {
		return nil, nil
	}
	ms, err := a.store.ListMembers(ctx, sc.acct.ID)
	if err != nil {
		return nil, err
	}
	out := ms[:0]
	for _, m := range ms {
		if !m.Pending {
			out = append(out, m)
		}
	}
	return out, nil
}
