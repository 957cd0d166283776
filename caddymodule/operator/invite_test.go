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
