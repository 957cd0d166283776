package account

import (
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// Usage by key: which of the account's API keys (apps, colleagues, environments) spent what,
// on the dashboard for its 30 days and as a CSV of the whole history (usage-by-key.csv), from
// the ledger's UsageByKey joined with the keys' names and last 4 characters (never the key).

// keyUsage is one key's use as the dashboard shows it.
type keyUsage struct {
	KeyID   string
	Name    string // the key's name, "" for a key the ledger no longer lists
	Last4   string
	Mode    ledger.Mode
	Revoked bool
	// Requests, Credits (charged) and NotCharged (voided) over every tool; Tools is the
	// generations per tool, most first ("summarizer 3, translator 1").
	Requests, Credits, NotCharged int64
	Tools                         string
}

// keyNames returns the account's keys the session may see by id, and the ids of those it may
// not (an owner's or another admin's key, for an admin): their use is left out.
func (a *app) keyNames(ctx context.Context, sc *sessionCtx) (names map[string]ledger.Key, hidden map[string]bool, err error) {
	keys, err := a.store.ListKeys(ctx, sc.acct.ID)
	if err != nil {
		return nil, nil, err
	}
	roles, err := a.memberRoles(ctx, sc)
	if err != nil {
		return nil, nil, err
	}
	names, hidden = make(map[string]ledger.Key, len(keys)), map[string]bool{}
	for _, k := range keys {
		if sc.mayKey(k, roles, ledger.ActKeySee) {
			names[k.ID] = k
		} else {
			hidden[k.ID] = true
		}
	}
	return names, hidden, nil
}

// usageByKey is the account's use per key from `from` on, the busiest key first, of the keys
// the session may see.
func (a *app) usageByKey(ctx context.Context, sc *sessionCtx, from time.Time) ([]keyUsage, error) {
	rows, err := a.store.UsageByKey(ctx, ledger.UsageQuery{AccountID: sc.acct.ID, From: from})
	if err != nil {
		return nil, err
	}
	names, hidden, err := a.keyNames(ctx, sc)
	if err != nil {
		return nil, err
	}
	type perTool struct {
		tool string
		n    int64
	}
	byKey := map[string]*keyUsage{}
	tools := map[string][]perTool{}
	for _, r := range rows {
		if hidden[r.KeyID] {
			continue
		}
		id := r.KeyID + "\x00" + string(r.Mode)
		u := byKey[id]
		if u == nil {
			k := names[r.KeyID]
			u = &keyUsage{KeyID: r.KeyID, Name: k.Name, Last4: k.Last4, Mode: r.Mode, Revoked: !k.Revoked.IsZero()}
			byKey[id] = u
		}
		u.Requests += r.Requests
		u.Credits += r.Credits
		u.NotCharged += r.Voided
		tools[id] = append(tools[id], perTool{r.Tool, r.Requests})
	}
	out := make([]keyUsage, 0, len(byKey))
	for id, u := range byKey {
		ts := tools[id]
		sort.SliceStable(ts, func(i, j int) bool { return ts[i].n > ts[j].n })
		parts := make([]string, len(ts))
		for i, t := range ts {
			parts[i] = fmt.Sprintf("%s %d", t.tool, t.n)
		}
		u.Tools = strings.Join(parts, ", ")
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Requests != out[j].Requests {
			return out[i].Requests > out[j].Requests
		}
		return out[i].KeyID+string(out[i].Mode) < out[j].KeyID+string(out[j].Mode)
	})
	return out, nil
}

// keyUsageColumns is the header of usage-by-key.csv.
var keyUsageColumns = []string{"key_id", "key_name", "key_last4", "mode", "tool", "requests", "credits", "not_charged"}

// exportKeyUsageCSV answers GET {prefix}/usage-by-key.csv: the whole history's use per key,
// tool and mode.
func (a *app) exportKeyUsageCSV(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	ctx := r.Context()
	rows, err := a.store.UsageByKey(ctx, ledger.UsageQuery{AccountID: sc.acct.ID})
	if err != nil {
		a.internalError(w, r, sc, "reading usage by key for the CSV export", err)
		return
	}
	names, hidden, err := a.keyNames(ctx, sc)
	if err != nil {
		a.internalError(w, r, sc, "reading keys for the CSV export", err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/csv; charset=utf-8")
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="usage-by-key-%s.csv"`, now().UTC().Format("2006-01-02")))
	cw := csv.NewWriter(w)
	cw.Write(keyUsageColumns)
	for _, u := range rows {
		if hidden[u.KeyID] {
			continue
		}
		k := names[u.KeyID]
		cw.Write([]string{u.KeyID, csvText(k.Name), k.Last4, string(u.Mode), u.Tool,
			strconv.FormatInt(u.Requests, 10), strconv.FormatInt(u.Credits, 10), strconv.FormatInt(u.Voided, 10)})
	}
	cw.Flush()
}
