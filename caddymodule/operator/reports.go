package operator

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// What an operator reads: an account's balance and ledger entries, the usage summary, and the
// ledger's verification.

func (adminAPI) balance(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	id := r.PathValue("id")
	bal, err := store.Balance(r.Context(), id)
	if err != nil {
		return accountError(err, id, "reading the balance of account %s", id)
	}
	return writeAdminJSON(w, http.StatusOK, bal)
}

func (adminAPI) history(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	page, err := pageFromQuery(r)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	entries, next, err := store.History(r.Context(), id, page)
	if err != nil {
		return accountError(err, id, "reading the ledger of account %s", id)
	}
	if entries == nil {
		entries = []ledger.Entry{}
	}
	return writeAdminJSON(w, http.StatusOK, entryList{AccountID: id, Entries: entries, NextCursor: next})
}

func (adminAPI) usage(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	q := r.URL.Query()
	var uq ledger.UsageQuery
	var err error
	if s := q.Get("from"); s != "" {
		if uq.From, err = parseUsageTime(s, false); err != nil {
			return badRequest("from: %v", err)
		}
	}
	if s := q.Get("to"); s != "" {
		if uq.To, err = parseUsageTime(s, true); err != nil {
			return badRequest("to: %v", err)
		}
	}
	if !uq.From.IsZero() && !uq.To.IsZero() && uq.To.Before(uq.From) {
		return badRequest("to (%s) is before from (%s)", q.Get("to"), q.Get("from"))
	}
	uq.AccountID = q.Get("account")
	rows, err := store.Usage(r.Context(), uq)
	if err != nil {
		return accountError(err, uq.AccountID, "reading usage")
	}
	rep := summarizeUsage(rows)
	rep.AccountID, rep.From, rep.To = uq.AccountID, q.Get("from"), q.Get("to")
	return writeAdminJSON(w, http.StatusOK, rep)
}

// parseUsageTime reads a day (YYYY-MM-DD, UTC) or an RFC 3339 time. The ledger's upper bound
// is exclusive, so a day as the upper bound becomes the start of the next day: "to" a day
// includes that whole day.
func parseUsageTime(s string, end bool) (time.Time, error) {
	if d, err := time.Parse(time.DateOnly, s); err == nil {
		if end {
			return d.Add(24 * time.Hour), nil
		}
		return d, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither a day (2025-01-31) nor an RFC 3339 time", s)
	}
	return t, nil
}

func summarizeUsage(rows []ledger.UsageRow) usageReport {
	if rows == nil {
		rows = []ledger.UsageRow{}
	}
	sum := func(key func(ledger.UsageRow) usageSum) []usageSum {
		idx := map[usageSum]*usageSum{}
		var order []*usageSum
		for _, row := range rows {
			k := key(row)
			s := idx[k]
			if s == nil {
				s = &usageSum{Day: k.Day, Tool: k.Tool, Mode: k.Mode}
				idx[k] = s
				order = append(order, s)
			}
			s.Requests += row.Requests
			s.Settled += row.Settled
			s.Credits += row.Credits
			s.Voided += row.Voided
		}
		out := make([]usageSum, 0, len(order))
		for _, s := range order {
			out = append(out, *s)
		}
		slices.SortFunc(out, func(a, b usageSum) int {
			return strings.Compare(a.Day+"\x00"+a.Tool+"\x00"+string(a.Mode), b.Day+"\x00"+b.Tool+"\x00"+string(b.Mode))
		})
		return out
	}
	return usageReport{
		Rows:   rows,
		ByTool: sum(func(r ledger.UsageRow) usageSum { return usageSum{Tool: r.Tool, Mode: r.Mode} }),
		ByDay:  sum(func(r ledger.UsageRow) usageSum { return usageSum{Day: r.Day, Mode: r.Mode} }),
		Total:  sum(func(r ledger.UsageRow) usageSum { return usageSum{Mode: r.Mode} }),
	}
}

// verify answers the ledger's verification: the report, as JSON. With ?progress=<duration>
// (what the CLI asks) it answers, once Verify has started, a stream of JSON lines instead
// (application/x-ndjson): {"progress":{"done":N,"total":M}} (accounts) at the start and at most
// once a <duration> after it, then {"report":{...}} or {"error":"...","status":N}. The stream
// also sends the status line at once, so that a client's wait for headers does not run out
// while a large ledger is verified. A failure before the first line, and the verification of a
// ledger that reports no progress, are answered as without ?progress.
func (adminAPI) verify(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	var st *progressStream
	var progress ledger.ProgressFunc
	if q := r.URL.Query(); q.Has("progress") {
		every, err := time.ParseDuration(q.Get("progress"))
		if err != nil || every < 0 {
			return badRequest("progress: %q is not a duration such as 1s", q.Get("progress"))
		}
		st = &progressStream{w: w, every: every}
		progress = st.progress
	}
	rep, err := ledger.VerifyWithProgress(r.Context(), store, progress)
	if err == nil && rep.Problems == nil {
		rep.Problems = []ledger.Problem{}
	}
	switch {
	case st == nil || !st.started:
		if err != nil {
			return ledgerError(err, "verifying the ledger")
		}
		return writeAdminJSON(w, http.StatusOK, rep)
	case err != nil:
		st.fail(ledgerError(err, "verifying the ledger"))
		return nil
	}
	st.line(struct {
		Report ledger.VerifyReport `json:"report"`
	}{rep})
	return nil
}
