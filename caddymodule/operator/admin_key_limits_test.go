package operator

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// TestAdminKeyLimitsAndRoll: the admin API sets a key's limits (what is sent changes, the rest
// is kept), shows what is left of its budgets, refuses bad limits, and rolls the key to a new
// secret for the same id with the old one kept for the grace period.
func TestAdminKeyLimitsAndRoll(t *testing.T) {
	dir := adminLedger(t)
	_, acct := adminDo(t, dir, "POST", "/textgen/accounts", `{"email":"lim@example.com"}`)
	id := acct["id"].(string)
	_, created := adminDo(t, dir, "POST", "/textgen/accounts/"+id+"/keys", `{"name":"ci"}`)
	kid, old := created["id"].(string), created["key"].(string)
	base := "/textgen/accounts/" + id + "/keys/" + kid

	w, k := adminDo(t, dir, "POST", base+"/limits", `{"budget_day":3,"budget_total":10,"allowed_tools":["summarizer"],"allowed_cidrs":["10.1.2.3/8"],"note":"the build"}`)
	wantStatus(t, w, http.StatusOK, "")
	rem, _ := k["remaining"].(map[string]any)
	if k["budget_day"] != 3.0 || k["budget_total"] != 10.0 || k["note"] != "the build" || k["name"] != "ci" ||
		rem["day"] != 3.0 || rem["total"] != 10.0 || rem["month"] != nil || !strings.Contains(w.Body.String(), `"allowed_cidrs":["10.0.0.0/8"]`) {
		t.Fatalf("limits: %s", w.Body)
	}
	// What is not sent is kept; 0 and [] remove a limit.
	w, k = adminDo(t, dir, "POST", base+"/limits", `{"budget_total":0,"allowed_tools":[]}`)
	wantStatus(t, w, http.StatusOK, "")
	if k["budget_day"] != 3.0 || k["budget_total"] != nil || k["allowed_tools"] != nil || k["note"] != "the build" {
		t.Fatalf("partial change: %s", w.Body)
	}
	// Spending shows in what is left.
	store := textgenapp.OpenLedgers()[dir]
	if _, err := store.Grant(context.Background(), ledger.GrantRequest{AccountID: id, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Hold(context.Background(), ledger.HoldRequest{AccountID: id, Mode: ledger.Live, RequestID: "r1", KeyID: kid}); err != nil {
		t.Fatal(err)
	}
	_, list := adminDo(t, dir, "GET", "/textgen/accounts/"+id+"/keys", "")
	k0 := list["keys"].([]any)[0].(map[string]any)
	if k0["remaining"].(map[string]any)["day"] != 2.0 || k0["usage"].(map[string]any)["day"] != 1.0 {
		t.Fatalf("after a hold: %v", k0)
	}
	// Bad limits change nothing.
	for body, msg := range map[string]string{
		`{"budget_day":-1}`:                "budget_day",
		`{"allowed_tools":["nope"]}`:       "allowed_tools",
		`{"allowed_cidrs":["10.0.0.300"]}`: "not a CIDR",
		`{"expires":"yesterday"}`:          "expires",
		`{"budget_dayz":1}`:                "budget_dayz",
	} {
		w, _ := adminDo(t, dir, "POST", base+"/limits", body)
		wantStatus(t, w, http.StatusBadRequest, msg)
	}
	w, _ = adminDo(t, dir, "POST", "/textgen/accounts/"+id+"/keys/key_nope/limits", `{"budget_day":1}`)
	wantStatus(t, w, http.StatusNotFound, "has no key key_nope")

	// A roll: a new secret for the same key id, the old one kept for the grace period.
	w, rolled := adminDo(t, dir, "POST", base+"/roll", `{"grace":"1h"}`)
	wantStatus(t, w, http.StatusOK, "")
	nw, _ := rolled["key"].(string)
	if rolled["id"] != kid || nw == old || !strings.HasPrefix(nw, "tg_live_") || rolled["previous_last4"] != old[len(old)-4:] ||
		rolled["grace_until"] == nil || rolled["budget_day"] != 3.0 {
		t.Fatalf("roll: %s", w.Body)
	}
	for _, full := range []string{old, nw} {
		if got, _, err := store.LookupKey(context.Background(), full); err != nil || got.ID != kid {
			t.Fatalf("lookup after the roll: %v", err)
		}
	}
	_, list = adminDo(t, dir, "GET", "/textgen/accounts/"+id+"/keys", "")
	if strings.Contains(strings.ToLower(list["keys"].([]any)[0].(map[string]any)["hint"].(string)), "digest") {
		t.Fatal("digest shown")
	}
	for body, msg := range map[string]string{`{"grace":"8d"}`: "0 to 7 days", `{"grace":"-1h"}`: "0 to 7 days"} {
		w, _ := adminDo(t, dir, "POST", base+"/roll", body)
		wantStatus(t, w, http.StatusBadRequest, msg)
	}
	adminDo(t, dir, "POST", base+"/revoke", "")
	w, _ = adminDo(t, dir, "POST", base+"/roll", `{}`)
	wantStatus(t, w, http.StatusConflict, "revoked")
	w, _ = adminDo(t, dir, "POST", base+"/limits", `{"budget_day":1}`)
	wantStatus(t, w, http.StatusConflict, "revoked")
	// Every change made is in the audit log, and so is every refused one.
	wantAudit(t, store,
		"admin_api key.limits "+id+" key "+kid,
		"admin_api key.roll "+id+" key "+kid+", grace 1h0m0s",
		"admin_api key.roll.failed "+id+" key already revoked")
}
