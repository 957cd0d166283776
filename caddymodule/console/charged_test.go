package console

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// TestConsoleOverviewCharged, on Badger and PostgreSQL: the Overview's error rates count, per
// day, the live holds, the settled (charged) and the voided (not charged) and the share not
// charged, for a known mix made through the ledger (a hold still open is neither; a test-mode
// generation does not count); 30 days are shown.
func TestConsoleOverviewCharged(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, eng.open(t))
			acct, err := e.store.CreateAccount(bg, "a@example.com")
			if err != nil {
				t.Fatal(err)
			}
			for _, mode := range []ledger.Mode{ledger.Live, ledger.Test} {
				if _, err := e.store.Grant(bg, ledger.GrantRequest{AccountID: acct.ID, Mode: mode, Kind: ledger.KindGrant, Credits: 10}); err != nil {
					t.Fatal(err)
				}
			}
			before := time.Now().UTC().Format("2006-01-02")
			// Six live holds: three settled, two voided, one left open; one test-mode hold, voided.
			for i, outcome := range []string{"settle", "settle", "void", "settle", "void", "open"} {
				id := fmt.Sprintf("r%d", i)
				if _, err := e.store.Hold(bg, ledger.HoldRequest{AccountID: acct.ID, Mode: ledger.Live, RequestID: id}); err != nil {
					t.Fatal(err)
				}
				switch outcome {
				case "settle":
					_, err = e.store.Settle(bg, acct.ID, id)
				case "void":
					_, err = e.store.Void(bg, acct.ID, id, "model failed")
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.store.Hold(bg, ledger.HoldRequest{AccountID: acct.ID, Mode: ledger.Test, RequestID: "t1"}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Void(bg, acct.ID, "t1", "model failed"); err != nil {
				t.Fatal(err)
			}
			after := time.Now().UTC().Format("2006-01-02")

			en := e.enroll("vera@example.com", ledger.OperatorViewer)
			viewer := e.client()
			expectStatus(t, "the viewer logs in", viewer.login("vera@example.com", en.Password, en.RecoveryCodes[0]), http.StatusSeeOther)
			r := viewer.get("/console/")
			expectStatus(t, "the overview", r, http.StatusOK)
			rows := chargedTableRows(t, r.body)
			if len(rows) != 30 {
				t.Fatalf("the overview shows %d days of error rates, want 30:\n%s", len(rows), strings.Join(rows, "\n"))
			}
			var sum [3]int
			for _, row := range rows {
				var day string
				var holds, settled, voided int
				if _, err := fmt.Sscanf(row, "%s %d %d %d", &day, &holds, &settled, &voided); err != nil {
					t.Fatalf("row %q: %v", row, err)
				}
				sum[0], sum[1], sum[2] = sum[0]+holds, sum[1]+settled, sum[2]+voided
			}
			if sum != [3]int{6, 3, 2} {
				t.Fatalf("the error rates count %v (holds, charged, not charged), want [6 3 2]:\n%s", sum, strings.Join(rows, "\n"))
			}
			if before == after { // all on one UTC day (the test did not run across midnight)
				mustContain(t, "the day's error rate", rows[0], before+" 6 3 2 40.0%")
			}
			mustContain(t, "a day without generations", rows[len(rows)-1], " 0 0 0 -")
		})
	}
}

var chargedRowRe = regexp.MustCompile(`<tr><td>(\d{4}-\d\d-\d\d)</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td><td>([^<]+)</td>`)

// chargedTableRows are the rows of the error rates' table, each "day holds charged voided share".
func chargedTableRows(t *testing.T, body string) []string {
	t.Helper()
	start := strings.Index(body, `<table id="charged">`)
	if start < 0 {
		t.Fatalf("no error rates' table in:\n%s", body)
	}
	table := body[start : start+strings.Index(body[start:], "</table>")]
	var out []string
	for _, m := range chargedRowRe.FindAllStringSubmatch(table, -1) {
		out = append(out, strings.Join(m[1:], " "))
	}
	return out
}
