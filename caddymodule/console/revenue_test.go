package console

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
)

// TestConsoleRevenue: the Overview's revenue and credits sold, and the accountant's CSV of the
// month, against what the test bought, refunded and disputed (a pending payment counts for
// nothing); a viewer may read both; text fields that a spreadsheet would run are escaped.
func TestConsoleRevenue(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, eng.open(t))
			buy := func(acct, ref, pi string, credits, cents int64, status ledger.PaymentStatus) ledger.Payment {
				t.Helper()
				if status == ledger.PaymentPaid {
					if _, err := e.store.Grant(bg, ledger.GrantRequest{AccountID: acct, Mode: ledger.Live, Kind: ledger.KindPurchase,
						Credits: credits, Reference: ref, AmountCents: cents, Currency: "EUR"}); err != nil {
						t.Fatal(err)
					}
				}
				p, _, err := e.store.RecordPayment(bg, ledger.Payment{ID: pi, Reference: ref, AccountID: acct, Package: "p",
					Credits: credits, AmountCents: cents, Currency: "eur", Status: status})
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			reverse := func(req ledger.ReversalRequest) ledger.Reversal {
				t.Helper()
				req.Currency, req.Event = "eur", "evt_"+req.ID
				res, err := e.store.Reverse(bg, req)
				if err != nil {
					t.Fatal(err)
				}
				return res.Reversal
			}
			a, _ := e.store.CreateAccount(bg, "a@example.com")
			b, _ := e.store.CreateAccount(bg, "=cmd@example.com")
			pa := buy(a.ID, "cs_a1", "pi_a1", 100, 900, ledger.PaymentPaid)
			pb := buy(b.ID, "+cs_b1", "pi_b1", 300, 2500, ledger.PaymentPaid)
			buy(a.ID, "cs_a2", "pi_a2", 0, 900, ledger.PaymentPending)
			ra := reverse(ledger.ReversalRequest{ID: "re_a1", Kind: ledger.ReversalRefund, Payment: "pi_a1", AmountCents: 450,
				Status: ledger.RefundApplied, Reason: "requested_by_customer"})
			db := reverse(ledger.ReversalRequest{ID: "du_b1", Kind: ledger.ReversalDispute, Payment: "pi_b1", AmountCents: 2500,
				Status: ledger.DisputeOpen, Reason: "fraudulent"})
			if ra.Credits <= 0 || db.Credits != 300 {
				t.Fatalf("the reversals took %d and %d credits", ra.Credits, db.Credits)
			}

			en := e.enroll("vera@example.com", ledger.OperatorViewer)
			viewer := e.client()
			expectStatus(t, "the viewer logs in", viewer.login("vera@example.com", en.Password, en.RecoveryCodes[0]), http.StatusSeeOther)
			r := viewer.get("/console/")
			expectStatus(t, "the overview", r, http.StatusOK)
			// Purchases 9.00 + 25.00 EUR, minus the refund of 4.50 EUR; the dispute is not a refund.
			mustContain(t, "the overview", r.body, `<strong id="revenue-net">29.50 EUR</strong>`, `<strong id="credits-sold">400</strong>`)
			day := pa.Created.UTC().Format("2006-01-02")
			if pb.Created.UTC().Format("2006-01-02") == day && ra.Created.UTC().Format("2006-01-02") == day {
				mustContain(t, "the overview's day", r.body, "<tr><td>"+day+"</td><td>34.00 EUR</td><td>-4.50 EUR</td><td>29.50 EUR</td><td>400</td>")
			}
			if n := len(regexp.MustCompile(`<tr><td>\d{4}-\d\d-\d\d</td><td>[-0-9.]+ EUR`).FindAllString(r.body, -1)); n != 30 {
				t.Fatalf("the overview shows %d days of revenue, want 30", n)
			}

			month := pa.Created.UTC().Format("2006-01")
			r = viewer.get("/console/exports/payments-" + month + ".csv")
			expectStatus(t, "the export", r, http.StatusOK)
			if ct, cd := r.header.Get("Content-Type"), r.header.Get("Content-Disposition"); !strings.HasPrefix(ct, "text/csv") ||
				cd != `attachment; filename="payments-`+month+`.csv"` {
				t.Fatalf("the export's headers: %q %q", ct, cd)
			}
			recs, err := csv.NewReader(strings.NewReader(r.body)).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, rec := range recs {
				got = append(got, strings.Join(rec[1:], ","))
			}
			want := []string{
				"account,reference,kind,credits,amount_cents,currency",
				a.ID + ",cs_a1,purchase,100,900,EUR",
				b.ID + ",'+cs_b1,purchase,300,2500,EUR",
				a.ID + ",cs_a1,refund," + fmt.Sprint(-ra.Credits) + ",-450,EUR",
				b.ID + ",'+cs_b1,dispute,-300,-2500,EUR",
			}
			if recs[0][0] != "date" || strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("the export:\n%s\nwant:\n%s", r.body, strings.Join(want, "\n"))
			}
			if recs[1][0] != pa.Created.UTC().Format("2006-01-02T15:04:05Z07:00") {
				t.Fatalf("the export's date: %q, the purchase's %s", recs[1][0], pa.Created)
			}
			r = viewer.get("/console/exports/payments-2020-01.csv")
			expectStatus(t, "an empty month's export", r, http.StatusOK)
			if strings.TrimSpace(r.body) != "date,account,reference,kind,credits,amount_cents,currency" {
				t.Fatalf("an empty month's export: %q", r.body)
			}
			for _, bad := range []string{"payments-2026-13.csv", "payments-2026-1.csv", "payments.csv", "other-2026-01.csv"} {
				expectStatus(t, "the export "+bad, viewer.get("/console/exports/"+bad), http.StatusNotFound)
			}
			expectStatus(t, "the export without a session", e.client().get("/console/exports/payments-"+month+".csv"), http.StatusSeeOther)
		})
	}
}
