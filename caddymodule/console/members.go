package console

import (
	"context"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// An organisation's members on its account page, read-only: each with role, monthly cap, what
// its keys took this UTC month (ListMembers' Used: settled or held, what the cap counts) and
// last month (MemberUsage), and invitations not accepted yet.

type memberRow struct {
	ledger.Membership
	LastMonthCredits int64
}

// members lists organisation id's members; none (and no month) for a personal account.
func (a *app) members(ctx context.Context, id string) ([]memberRow, string, error) {
	ms, err := a.store.ListMembers(ctx, id)
	if err != nil || len(ms) == 0 {
		return nil, "", err
	}
	t := now().UTC()
	last := time.Date(t.Year(), t.Month()-1, 1, 0, 0, 0, 0, time.UTC).Format("2006-01")
	usage, err := a.store.MemberUsage(ctx, id, last, last)
	if err != nil {
		return nil, "", err
	}
	took := map[string]int64{}
	for _, u := range usage {
		took[u.MemberID] += u.Credits
	}
	rows := make([]memberRow, 0, len(ms))
	for _, m := range ms {
		rows = append(rows, memberRow{Membership: m, LastMonthCredits: took[m.MemberID]})
	}
	return rows, last, nil
}
