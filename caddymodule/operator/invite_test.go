package operator

import (
	"net/http"
	"testing"
)

// An invitation needs My Account on the ledger (it makes the link and the e-mail): without it
// the route says so. The way through, with My Account and a real SMTP server, is
// caddymodule/account's TestBrowserMailFlows.
func TestAdminInviteWithoutAccountArea(t *testing.T) {
	dir := adminLedger(t)
	w, acct := adminDo(t, dir, "POST", "/textgen/accounts", `{"email":"invite@example.com"}`)
	wantStatus(t, w, http.StatusCreated, "")
	id, _ := acct["id"].(string)
	w, _ = adminDo(t, dir, "POST", "/textgen/accounts/"+id+"/invite", ``)
	wantStatus(t, w, http.StatusConflict, "no textgen_account serves this ledger")
	w, _ = adminDo(t, dir, "POST", "/textgen/accounts/"+id+"/invite", `{"x":1}`)
	wantStatus(t, w, http.StatusBadRequest, "unknown field")
}

// Alert endpoints need My Account on the ledger (it seals the secret and checks the URL):
// without it the route says so, and bad requests are refused with what is wrong. The way
// through, with My Account and a real receiver, is caddymodule/account's TestBrowserAlerts.
func TestAdminAlertsWithoutAccountArea(t *testing.T) {
	dir := adminLedger(t)
	w, acct := adminDo(t, dir, "POST", "/textgen/accounts", `{"email":"alerts@example.com"}`)
	wantStatus(t, w, http.StatusCreated, "")
	id, _ := acct["id"].(string)
	w, list := adminDo(t, dir, "GET", "/textgen/accounts/"+id+"/alerts", "")
	wantStatus(t, w, http.StatusOK, "")
	if eps, _ := list["endpoints"].([]any); eps == nil || len(eps) != 0 {
		t.Fatalf("listed %v", list)
	}
	w, _ = adminDo(t, dir, "POST", "/textgen/accounts/"+id+"/alerts", `{"url":"https://example.com/hook"}`)
	wantStatus(t, w, http.StatusConflict, "no textgen_account with alerts on")
	w, _ = adminDo(t, dir, "POST", "/textgen/accounts/"+id+"/alerts", `{"url":"https://example.com/hook","kinds":["nope"]}`)
	wantStatus(t, w, http.StatusBadRequest, "not an event type")
	w, _ = adminDo(t, dir, "POST", "/textgen/accounts/"+id+"/alerts", `{}`)
	wantStatus(t, w, http.StatusBadRequest, "url is required")
	w, _ = adminDo(t, dir, "POST", "/textgen/accounts/"+id+"/alerts/whe_nope/delete", ``)
	wantStatus(t, w, http.StatusNotFound, "no alert endpoint")
	w, _ = adminDo(t, dir, "GET", "/textgen/accounts/acct_nope/alerts", "")
	wantStatus(t, w, http.StatusNotFound, "not found")
}
