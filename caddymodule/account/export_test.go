package account

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
)

func TestExportCSV(t *testing.T) {
	e := newTestEnv(t)
	b := e.browser()
	acct := b.signup("export@example.com")
	mustGrant(t, e.store, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindPurchase,
		Credits: 600, Reference: "cs_test_export", Reason: checkoutReason + "600", AmountCents: 9950, Currency: "EUR"})
	// An operator's reason that a spreadsheet would run as a formula.
	mustGrant(t, e.store, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindGrant,
		Credits: 1, Reference: "grant_1", Reason: "=HYPERLINK(\"http://evil\")"})
	// 520 requests: 1,040 entries, more than one page of the ledger's history.
	for i := range 520 {
		requestOn(t, e.store, acct.ID, fmt.Sprint("req_", i), "summarizer", ledger.Live, i%2 == 0)
	}
	hist, _, err := e.store.History(bg, acct.ID, ledger.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}

	r := b.get("/account/usage.csv")
	expectStatus(t, "export", r, http.StatusOK)
	if ct, cd := r.header.Get("Content-Type"), r.header.Get("Content-Disposition"); ct != "text/csv; charset=utf-8" || !strings.HasPrefix(cd, `attachment; filename="history-`) {
		t.Fatalf("headers %q %q", ct, cd)
	}
	recs, err := csv.NewReader(strings.NewReader(r.body)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(recs[0], ",") != strings.Join(exportColumns, ",") {
		t.Fatalf("header %q", recs[0])
	}
	// Every entry: the sign-up's test credits, the two grants and 1,040 request entries.
	if got, want := len(recs)-1, 1+2+1040; got != want {
		t.Fatalf("%d rows, want %d", got, want)
	}
	// Newest first, as History returns them.
	if newest := recs[1]; newest[0] != hist[0].Time.UTC().Format("2006-01-02T15:04:05Z07:00") || newest[6] != "req_519" || newest[1] != string(hist[0].Kind) {
		t.Fatalf("first row %q, newest entry %+v", newest, hist[0])
	}
	var purchase, grant []string
	for _, rec := range recs[1:] {
		switch rec[9] {
		case "cs_test_export":
			purchase = rec
		case "grant_1":
			grant = rec
		}
	}
	if strings.Join(purchase, ",") == "" || purchase[1] != "purchase" || purchase[3] != "600" || purchase[10] != "99.50" || purchase[11] != "EUR" || purchase[12] != "Stripe Checkout, package 600" {
		t.Fatalf("purchase row %q", purchase)
	}
	if grant == nil || grant[12] != `'=HYPERLINK("http://evil")` {
		t.Fatalf("the formula is not neutralised: %q", grant)
	}
	// The oldest: the sign-up's 50 test credits.
	if last := recs[len(recs)-1]; last[1] != "grant" || last[2] != "test" || last[3] != "50" {
		t.Fatalf("oldest row %q, want the sign-up's test credits", last)
	}

	// Only for the logged-in owner.
	anon := e.browser().get("/account/usage.csv")
	if anon.status != http.StatusSeeOther || !strings.HasPrefix(anon.location(), "/account/login") {
		t.Fatalf("logged out: %d %q", anon.status, anon.location())
	}
}
