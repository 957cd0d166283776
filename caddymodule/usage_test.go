package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/ledger"
)

type usageBody struct {
	AccountID string `json:"account_id"`
	MemberID  string `json:"member_id"`
	Mode      string `json:"mode"`
	From, To  string
	Balance   int64 `json:"balance"`
	Available int64 `json:"available"`
	Totals    struct {
		Credits, Generations, Requests int64
		NotCharged                     int64 `json:"not_charged"`
	} `json:"totals"`
	Days []struct {
		Day, Tool string
		KeyID     string `json:"key_id"`
		Credits   int64  `json:"credits"`
		Gens      int64  `json:"generations"`
	} `json:"days"`
	Keys []struct {
		ID        string `json:"id"`
		BudgetDay int64  `json:"budget_day"`
		Budget    *struct {
			Day *int64 `json:"remaining_day"`
		} `json:"budget"`
	} `json:"keys"`
}

// TestUsageAPI: GET /api/v1/usage tells a key's account what it spent by day, tool and key
// (credits at each tool's price), with its balance and its keys' budgets; a member's key sees
// that member's use alone; a bad period is a 400 that names the parameter and costs nothing.
func TestUsageAPI(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 2, Piece: "tok "})
	e := newEnv(t, envOptions{ollama: fs.URL, extra: pricedTool})
	ctx := context.Background()
	org, own := e.account(100)
	ownKey, _, err := e.store.LookupKey(ctx, own)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.UpdateKey(ctx, org.ID, ownKey.ID, ledger.KeySettings{Name: ownKey.Name, Limits: ledger.KeyLimits{BudgetDay: 20}}); err != nil {
		t.Fatal(err)
	}
	member, err := e.store.CreateAccount(ctx, fmt.Sprintf("usage-member-%d@example.com", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.MakeOrganisation(ctx, org.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.AddMember(ctx, org.ID, member.ID, ledger.RoleMember, false); err != nil {
		t.Fatal(err)
	}
	memberKey, mk, err := e.store.CreateMemberKey(ctx, org.ID, member.ID, ledger.Live, "member's", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	gen := func(key, tool string) {
		t.Helper()
		resp, err := e.post(ctx, key, genBody(tool, "x", "en", ""))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", tool, resp.StatusCode)
		}
	}
	gen(own, "summarizer")
	gen(own, "summarizer")
	gen(own, "keyword-generator")
	gen(memberKey, "summarizer")
	waitFor(t, "the settles", func() bool { return e.count(org.ID, ledger.KindSettle) == 4 })

	get := func(key, query string) usageBody {
		t.Helper()
		resp, text := e.getText(key, "/api/v1/usage"+query)
		var u usageBody
		if resp.StatusCode != 200 || resp.Header.Get("X-Credits-Used") != "0" || json.Unmarshal([]byte(text), &u) != nil {
			t.Fatalf("GET /api/v1/usage%s: %d %s", query, resp.StatusCode, text)
		}
		return u
	}
	today := time.Now().UTC().Format(time.DateOnly)
	u := get(own, "")
	if u.AccountID != org.ID || u.MemberID != "" || u.Mode != "live" || u.To != today || u.Balance != 90 || u.Available != 90 {
		t.Fatalf("the account's usage: %+v", u)
	}
	if u.Totals.Credits != 10 || u.Totals.Generations != 4 || u.Totals.Requests != 4 || u.Totals.NotCharged != 0 {
		t.Fatalf("totals: %+v", u.Totals)
	}
	byRow := map[string][2]int64{}
	for _, d := range u.Days {
		if d.Day != today {
			t.Fatalf("a row of another day: %+v", d)
		}
		byRow[d.Tool+" "+d.KeyID] = [2]int64{d.Credits, d.Gens}
	}
	want := map[string][2]int64{"summarizer " + ownKey.ID: {6, 2}, "keyword-generator " + ownKey.ID: {1, 1}, "summarizer " + mk.ID: {3, 1}}
	if fmt.Sprint(byRow) != fmt.Sprint(want) {
		t.Fatalf("rows %v, want %v", byRow, want)
	}
	budgets := map[string]string{}
	for _, k := range u.Keys {
		s := fmt.Sprint(k.BudgetDay)
		if k.Budget != nil && k.Budget.Day != nil {
			s += fmt.Sprint("/", *k.Budget.Day)
		}
		budgets[k.ID] = s
	}
	if budgets[ownKey.ID] != "20/13" || budgets[mk.ID] != "0" || len(budgets) != 2 {
		t.Fatalf("keys' budgets: %v", budgets)
	}

	// A member's key: that member's use alone.
	m := get(memberKey, "")
	if m.MemberID != member.ID || m.Totals.Credits != 3 || m.Totals.Generations != 1 || len(m.Days) != 1 || m.Days[0].KeyID != mk.ID ||
		len(m.Keys) != 1 || m.Keys[0].ID != mk.ID {
		t.Fatalf("the member's usage: %+v", m)
	}

	// A period without today has none of it.
	y, longAgo := time.Now().UTC().AddDate(0, 0, -1).Format(time.DateOnly), time.Now().UTC().AddDate(0, 0, -300).Format(time.DateOnly)
	if p := get(own, "?from="+longAgo+"&to="+y); p.From != longAgo || p.To != y || len(p.Days) != 0 || p.Totals.Credits != 0 {
		t.Fatalf("a period before today: %+v", p)
	}

	// Bad periods: 400 naming the parameter, nothing charged.
	for q, param := range map[string]string{"?from=yesterday": "from", "?to=2026-13-01": "to", "?from=2026-02-01&to=2026-01-01": "from",
		"?from=2020-01-01&to=2021-12-31": "from"} {
		resp, text := e.getText(own, "/api/v1/usage"+q)
		var b apiErrBody
		if json.Unmarshal([]byte(text), &b) != nil || resp.StatusCode != 400 || b.Error.Code != "invalid_field" || b.Error.Param != param ||
			resp.Header.Get("X-Credits-Used") != "0" {
			t.Fatalf("%s: %d %s", q, resp.StatusCode, text)
		}
	}
	if resp, _ := e.getText("", "/api/v1/usage"); resp.StatusCode != 401 {
		t.Fatalf("without a key: %d", resp.StatusCode)
	}
	if b := e.balance(org.ID); b.Balance != 90 {
		t.Fatalf("balance after the usage calls: %+v", b)
	}
	e.verify()
}
