package console

import (
	"encoding/csv"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The accountant's export: GET /exports/payments-YYYY-MM.csv, the purchases, refunds and
// disputes of one UTC month (revenue.go says which count), oldest first. Every role may read it.

func (a *app) export(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	name := r.PathValue("file")
	month, ok := strings.CutPrefix(name, "payments-")
	month, ok2 := strings.CutSuffix(month, ".csv")
	start, err := time.Parse("2006-01", month)
	if !ok || !ok2 || err != nil {
		a.errorPage(w, r, sc, http.StatusNotFound, "Page not found", "Exports are named payments-YYYY-MM.csv, for one month.")
		return
	}
	p, err := a.store.MoneyBetween(r.Context(), start, start.AddDate(0, 1, 0), moneyListLimit)
	if err != nil {
		a.internalError(w, r, sc, "read the month's payments", err)
		return
	}
	if p.Truncated {
		a.errorPage(w, r, sc, http.StatusInternalServerError, "Too many payments",
			"This month has more than "+strconv.Itoa(moneyListLimit)+" payments or reversals: the export would be incomplete, so none is made.")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/csv; charset=utf-8")
	h.Set("Content-Disposition", `attachment; filename="payments-`+month+`.csv"`)
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"date", "account", "reference", "kind", "credits", "amount_cents", "currency"})
	for _, row := range moneyRows(p) {
		_ = cw.Write([]string{row.Time.UTC().Format(time.RFC3339), csvText(row.AccountID), csvText(row.Reference), row.Kind,
			strconv.FormatInt(row.Credits, 10), strconv.FormatInt(row.AmountCents, 10), csvText(row.Currency)})
	}
	cw.Flush()
}

// csvText keeps a text field from being read as a formula by a spreadsheet (OWASP's CSV
// injection advice), as My Account's export does: a leading =, +, -, @, tab or carriage
// return gets a leading apostrophe.
func csvText(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}
