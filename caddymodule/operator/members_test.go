package operator

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// TestAdminMembers: the operator makes an account an organisation, adds a member, sets a role
// and a cap, reads usage by member and removes the member, whose key stops working; the last
// owner stays, and every refusal has its status and says why.
func TestAdminMembers(t *testing.T) {
	dir := adminLedger(t)
	ref, err := textgenapp.AcquireLedger(dir, badgerledger.Options{DisableSyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Release() })
	store, err := ref.Get()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, org := adminDo(t, dir, "POST", "/textgen/accounts", `{"email":"org@example.com"}`)
	_, bob := adminDo(t, dir, "POST", "/textgen/accounts", `{"email":"bob@example.com"}`)
	oid, bid := org["id"].(string), bob["id"].(string)
	base := "/textgen/accounts/" + oid

	w, got := adminDo(t, dir, "GET", base+"/members", "")
	wantStatus(t, w, http.StatusOK, "")
	if got["organisation"] != false {
		t.Fatalf("a personal account's members: %v", got)
	}
	w, _ = adminDo(t, dir, "POST", base+"/members", `{"member":"`+bid+`"}`)
	wantStatus(t, w, http.StatusConflict, "not an organisation")
	w, got = adminDo(t, dir, "POST", base+"/organisation", "")
	wantStatus(t, w, http.StatusOK, "")
	if got["organisation"] != true || len(got["members"].([]any)) != 1 {
		t.Fatalf("organisation: %v", got)
	}
	w, got = adminDo(t, dir, "POST", base+"/members", `{"member":"`+bid+`","role":"admin"}`)
	wantStatus(t, w, http.StatusOK, "")
	if got["role"] != "admin" || got["email"] != "bob@example.com" {
		t.Fatalf("add: %v", got)
	}
	for _, c := range []struct {
		path, body string
		status     int
		msg        string
	}{
		{base + "/members", `{"member":"` + bid + `"}`, 409, "already a member"},
		{base + "/members", `{"member":"acct_nope"}`, 404, "not found"},
		{base + "/members", `{}`, 400, "member is required"},
		{base + "/members", `{"member":"` + bid + `","role":"boss"}`, 400, "not owner, admin or member"},
		{base + "/members/" + oid + "/role", `{"role":"member"}`, 409, "last owner"},
		{base + "/members/" + oid + "/remove", ``, 400, "own login cannot leave"},
		{base + "/members/acct_nope/cap", `{"monthly_cap":3}`, 404, "not a member"},
		{base + "/members/" + bid + "/cap", `{}`, 400, "monthly_cap is required"},
		{base + "/members/" + bid + "/cap", `{"monthly_cap":-1}`, 400, "negative"},
	} {
		w, _ := adminDo(t, dir, "POST", c.path, c.body)
		wantStatus(t, w, c.status, c.msg)
	}
	w, got = adminDo(t, dir, "POST", base+"/members/"+bid+"/cap", `{"monthly_cap":3}`)
	wantStatus(t, w, http.StatusOK, "")
	if got["monthly_cap"] != float64(3) {
		t.Fatalf("cap: %v", got)
	}

	// bob's key spends the organisation's credits and shows in usage by member.
	if _, err := store.Grant(ctx, ledger.GrantRequest{AccountID: oid, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 5}); err != nil {
		t.Fatal(err)
	}
	full, k, err := store.CreateMemberKey(ctx, oid, bid, ledger.Live, "bob's", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Hold(ctx, ledger.HoldRequest{AccountID: oid, Mode: ledger.Live, RequestID: "r1", KeyID: k.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Settle(ctx, oid, "r1"); err != nil {
		t.Fatal(err)
	}
	w, got = adminDo(t, dir, "GET", base+"/members/usage", "")
	wantStatus(t, w, http.StatusOK, "")
	if u := got["usage"].([]any); len(u) != 1 || u[0].(map[string]any)["member_id"] != bid || u[0].(map[string]any)["credits"] != float64(1) {
		t.Fatalf("usage by member: %v", got)
	}
	w, _ = adminDo(t, dir, "GET", base+"/members/usage?from=2030-1", "")
	wantStatus(t, w, http.StatusBadRequest, "YYYY-MM")

	w, got = adminDo(t, dir, "POST", base+"/members/"+bid+"/remove", "")
	wantStatus(t, w, http.StatusOK, "")
	if rk := got["revoked_keys"].([]any); len(rk) != 1 || rk[0].(map[string]any)["id"] != k.ID || rk[0].(map[string]any)["member_id"] != bid {
		t.Fatalf("remove: %v", got)
	}
	if _, _, err := store.LookupKey(ctx, full); err != ledger.ErrInvalidKey {
		t.Fatalf("bob's key after his removal: %v", err)
	}
	w, _ = adminDo(t, dir, "POST", base+"/members/"+bid+"/remove", "")
	wantStatus(t, w, http.StatusNotFound, "not a member")
	wantAudit(t, store,
		"admin_api organisation "+oid,
		"admin_api member.add "+oid+" member "+bid+" as admin",
		"admin_api member.cap "+oid+" member "+bid+", monthly cap 3",
		"admin_api member.remove "+oid+" member "+bid)
}
