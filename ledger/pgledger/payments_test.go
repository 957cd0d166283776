package pgledger

import (
	"fmt"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// TestPostgresInstancesRacePayments: two instances on one database race to record one payment
// and then to resolve it (a provider's event delivered twice, an operator's double click on two
// servers): the database keeps one record and one resolution, and one caller of each race wins.
func TestPostgresInstancesRacePayments(t *testing.T) {
	a, b := twoInstances(t, pgQuiet)
	both := []*Postgres{a, b}
	for r := range ledgertest.PaymentRaces {
		ref := fmt.Sprint("cs_race_", r)
		detail := func(i int) string { return fmt.Sprint("caller ", i) }
		recs, news := ledgertest.RacePayments(t, ledgertest.PaymentRacers, func(i int) (ledger.UnmatchedPayment, bool, error) {
			p := ledgertest.Unmatched(ref)
			p.Detail = detail(i)
			return both[i%2].RecordUnmatchedPayment(bg, p)
		})
		stored := ledgertest.MustPayments(t, b, false, 1)
		if len(stored) != 1 || stored[0].Reference != ref {
			t.Fatalf("newest payment %+v, want %s", stored, ref)
		}
		ledgertest.CheckOneWinner(t, stored[0], recs, news, func(p ledger.UnmatchedPayment) string { return p.Detail }, detail)

		note := func(i int) string { return fmt.Sprint("note ", i) }
		recs, news = ledgertest.RacePayments(t, ledgertest.PaymentRacers, func(i int) (ledger.UnmatchedPayment, bool, error) {
			return both[i%2].ResolveUnmatchedPayment(bg, ref, note(i))
		})
		stored = ledgertest.MustPayments(t, a, false, 1)
		ledgertest.CheckOneWinner(t, stored[0], recs, news, func(p ledger.UnmatchedPayment) string { return p.Resolution }, note)
	}
	if all := ledgertest.MustPayments(t, a, false, 0); len(all) != ledgertest.PaymentRaces {
		t.Fatalf("%d payments, want %d", len(all), ledgertest.PaymentRaces)
	}
}
