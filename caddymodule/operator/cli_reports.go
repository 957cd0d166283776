package operator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// caddy textgen balance, history, usage and ledger verify

func cmdBalance(c *cliContext) error {
	id, err := requireAccount(c.fl)
	if err != nil {
		return err
	}
	var b ledger.Balance
	raw, err := c.call(http.MethodGet, "/textgen/accounts/"+url.PathEscape(id)+"/balance", nil, nil, &b)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) { printBalance(w, b) })
}

func printBalance(w io.Writer, b ledger.Balance) {
	tw := cliTable(w)
	fmt.Fprintln(tw, "CREDITS\tBALANCE\tAVAILABLE")
	fmt.Fprintf(tw, "live\t%d\t%d\n", b.Balance, b.Available)
	fmt.Fprintf(tw, "test\t%d\t%d\n", b.TestBalance, b.TestAvailable)
	tw.Flush()
	for _, x := range b.Expiring {
		fmt.Fprintf(w, "%d live credits expire %s.\n", x.Credits, x.Expires.UTC().Format(time.RFC3339))
	}
}

func cmdHistory(c *cliContext) error {
	id, err := requireAccount(c.fl)
	if err != nil {
		return err
	}
	limit := c.fl.Int("limit")
	if limit < 1 || limit > 1000 {
		return usagef("--limit must be from 1 to 1000")
	}
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if cur := c.fl.String("cursor"); cur != "" {
		q.Set("cursor", cur)
	}
	var el entryList
	raw, err := c.call(http.MethodGet, "/textgen/accounts/"+url.PathEscape(id)+"/ledger", q, nil, &el)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		tw := cliTable(w)
		fmt.Fprintln(tw, "SEQ\tTIME\tKIND\tMODE\tAMOUNT\tBALANCE\tAVAILABLE\tDETAIL")
		for _, e := range el.Entries {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%+d\t%d\t%d\t%s\n", e.Seq, cliTime(e.Time), e.Kind, e.Mode,
				e.Amount, e.BalanceAfter, e.AvailableAfter, entryDetail(e))
		}
		tw.Flush()
		if el.NextCursor != "" {
			fmt.Fprintf(w, "\nOlder entries: --cursor %s\n", el.NextCursor)
		}
	})
}

func entryDetail(e ledger.Entry) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	add("tool", e.Tool)
	add("request", e.RequestID)
	add("key", e.KeyID)
	add("reference", e.Reference)
	add("reason", e.Reason)
	if e.AmountCents != 0 {
		add("paid", fmt.Sprintf("%d.%02d %s", e.AmountCents/100, e.AmountCents%100, e.Currency))
	}
	return cliDash(strings.Join(parts, " "))
}

// --- usage ---

func cmdUsage(c *cliContext) error {
	if c.fl.Bool("by-key") {
		return cmdUsageByKey(c) // cli_usage_by_key.go
	}
	q := url.Values{}
	for _, name := range []string{"account", "from", "to"} {
		if v := strings.TrimSpace(c.fl.String(name)); v != "" {
			q.Set(name, v)
		}
	}
	var rep usageReport
	raw, err := c.call(http.MethodGet, "/textgen/usage", q, nil, &rep)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		if len(rep.Rows) == 0 {
			fmt.Fprintln(w, "No requests in this period.")
			return
		}
		tw := cliTable(w)
		fmt.Fprintln(tw, "DAY\tTOOL\tMODE\tREQUESTS\tSETTLED\tVOIDED\tCREDITS")
		for _, r := range rep.Rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\n", r.Day, r.Tool, r.Mode, r.Requests, r.Settled, r.Voided, r.Credits)
		}
		tw.Flush()
		fmt.Fprintln(w)
		tw = cliTable(w)
		fmt.Fprintln(tw, "TOOL\tMODE\tREQUESTS\tSETTLED\tVOIDED\tCREDITS")
		for _, s := range rep.ByTool {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\n", s.Tool, s.Mode, s.Requests, s.Settled, s.Voided, s.Credits)
		}
		for _, s := range rep.Total {
			fmt.Fprintf(tw, "TOTAL\t%s\t%d\t%d\t%d\t%d\n", s.Mode, s.Requests, s.Settled, s.Voided, s.Credits)
		}
		tw.Flush()
	})
}

// --- ledger ---

func cmdVerify(c *cliContext) error {
	p := c.progress()
	defer p.Close()
	p.Start("verifying", "accounts")
	raw, err := c.verifyReport(p)
	if err != nil {
		return err
	}
	var rep ledger.VerifyReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		return fmt.Errorf("the admin API's answer is not what this command expects (%v): %s", err, bytes.TrimSpace(raw))
	}
	p.Done()
	if err := c.print(raw, func(w io.Writer) {
		if rep.OK {
			fmt.Fprintf(w, "ok: %d accounts, %d entries; every balance equals the sum of its entries.\n", rep.Accounts, rep.Entries)
			return
		}
		fmt.Fprintf(w, "NOT OK: %d problems in %d accounts, %d entries.\n\n", len(rep.Problems), rep.Accounts, rep.Entries)
		tw := cliTable(w)
		fmt.Fprintln(tw, "ACCOUNT\tPROBLEM\tDETAIL")
		for _, p := range rep.Problems {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", cliDash(p.AccountID), p.Kind, p.Detail)
		}
		tw.Flush()
	}); err != nil {
		return err
	}
	if !rep.OK {
		return fmt.Errorf("ledger verify found %d problems", len(rep.Problems))
	}
	return nil
}
