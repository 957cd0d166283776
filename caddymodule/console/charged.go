package console

import (
	"fmt"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// The Overview's error rates: of the live generations that reached a hold, per UTC day, how many
// were charged (their hold settled) and how many were not (voided: the model failed or answered
// nothing, the client left, the hold expired), from the entries the ledger's Usage counts. A hold still open is neither yet; a settle or void counts on its own
// day.

// chargedDays is how many days of error rates the Overview shows.
const chargedDays = 30

type chargedDay struct {
	Day                    string
	Holds, Settled, Voided int64
	// NotCharged is the share of the settled and voided that were voided, as a percentage with
	// one decimal ("-" with neither).
	NotCharged string
	Bar        int // the same share, rounded down, for the bar
}

// chargedRows are the last chargedDays days up to today (from is the first), newest first.
func chargedRows(rows []ledger.UsageRow, from time.Time) []chargedDay {
	byDay := map[string]*chargedDay{}
	for i := range chargedDays {
		day := from.AddDate(0, 0, i).Format("2006-01-02")
		byDay[day] = &chargedDay{Day: day}
	}
	for _, u := range rows {
		if cd := byDay[u.Day]; cd != nil && u.Mode == ledger.Live {
			cd.Holds += u.Requests
			cd.Settled += u.Settled
			cd.Voided += u.Voided
		}
	}
	out := make([]chargedDay, 0, chargedDays)
	for i := chargedDays - 1; i >= 0; i-- {
		cd := byDay[from.AddDate(0, 0, i).Format("2006-01-02")]
		cd.NotCharged = "-"
		if n := cd.Settled + cd.Voided; n > 0 {
			permille := cd.Voided * 1000 / n
			cd.NotCharged = fmt.Sprintf("%d.%d%%", permille/10, permille%10)
			cd.Bar = int(permille / 10)
		}
		out = append(out, *cd)
	}
	return out
}
