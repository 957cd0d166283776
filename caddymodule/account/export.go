package account

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// The CSV export of an account's whole history: every ledger entry (purchases, grants, holds,
// charges, releases, refunds, disputes), newest first as the dashboard lists them, read from the ledger a page at a
// time so that a long history is never held in memory.

// exportPage is how many entries one ledger read returns (the History maximum).
const exportPage = 1000

// exportColumns is the CSV's header line.
var exportColumns = []string{"time", "kind", "mode", "credits", "balance_after", "available_after",
	"request_id", "key_id", "tool", "reference", "amount", "currency", "reason"}

func (a *app) exportCSV(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	ctx := r.Context()
	entries, next, err := a.store.History(ctx, sc.acct.ID, ledger.Page{Limit: exportPage})
	if err != nil {
		a.internalError(w, r, sc, "reading history for the CSV export", err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/csv; charset=utf-8")
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="history-%s.csv"`, now().UTC().Format("2006-01-02")))
	cw := csv.NewWriter(w)
	cw.Write(exportColumns)
	for {
		for _, e := range entries {
			cw.Write(exportRow(e))
		}
		cw.Flush()
		if next == "" || cw.Error() != nil {
			return
		}
		if entries, next, err = a.store.History(ctx, sc.acct.ID, ledger.Page{Limit: exportPage, Cursor: next}); err != nil {
			// The header is sent: abort the response, so that the browser reports a failed
			// download instead of keeping a file that looks complete.
			a.logger.Error("reading history for the CSV export", zap.String("account", sc.acct.ID), zap.Error(err))
			panic(http.ErrAbortHandler)
		}
	}
}

// exportRow is one entry as CSV fields; amounts of money in euros with two decimals, the
// currency in capitals (Stripe's refund and dispute events, whose entries keep what Stripe sent,
// write it in small letters; a purchase in capitals). A refund's or dispute's row has its id as
// the reference (with /failed, /won or /lost when it gave credits back or became final) and the
// amount refunded or disputed.
func exportRow(e ledger.Entry) []string {
	amount := ""
	if e.AmountCents != 0 {
		amount = fmt.Sprintf("%d.%02d", e.AmountCents/100, e.AmountCents%100)
	}
	return []string{
		e.Time.UTC().Format(time.RFC3339), string(e.Kind), string(e.Mode),
		strconv.FormatInt(e.Amount, 10), strconv.FormatInt(e.BalanceAfter, 10), strconv.FormatInt(e.AvailableAfter, 10),
		csvText(e.RequestID), csvText(e.KeyID), csvText(e.Tool), csvText(e.Reference), amount, csvText(strings.ToUpper(e.Currency)), csvText(e.Reason),
	}
}

// csvText keeps a text field from being read as a formula by a spreadsheet (OWASP's CSV
// injection advice): a leading =, +, -, @, tab or carriage return gets a leading apostrophe.
func csvText(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}
