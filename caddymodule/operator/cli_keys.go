package operator

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// caddy textgen key create|list|revoke

func cmdKeyCreate(c *cliContext) error {
	id, err := requireAccount(c.fl)
	if err != nil {
		return err
	}
	req := createKeyRequest{Mode: string(modeFlag(c.fl)), Name: c.fl.String("name")}
	if s := strings.TrimSpace(c.fl.String("expires")); s != "" {
		exp, err := parseExpiry(s, time.Now())
		if err != nil {
			return usagef("--expires: %v", err)
		}
		req.Expires = exp.Format(time.RFC3339)
	}
	var k createdKey
	raw, err := c.call(http.MethodPost, "/textgen/accounts/"+url.PathEscape(id)+"/keys", nil, req, &k)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		fmt.Fprintf(w, "API key (shown only this once; store it now):\n\n    %s\n\n", k.Key)
		printKeys(w, []keyView{k.keyView})
	})
}

func cmdKeyList(c *cliContext) error {
	id, err := requireAccount(c.fl)
	if err != nil {
		return err
	}
	var kl keyList
	raw, err := c.call(http.MethodGet, "/textgen/accounts/"+url.PathEscape(id)+"/keys", nil, nil, &kl)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) { printKeys(w, kl.Keys) })
}

func cmdKeyRevoke(c *cliContext) error {
	id, err := requireAccount(c.fl)
	if err != nil {
		return err
	}
	kid, err := requireString(c.fl, "key-id")
	if err != nil {
		return err
	}
	var k keyView
	raw, err := c.call(http.MethodPost, "/textgen/accounts/"+url.PathEscape(id)+"/keys/"+url.PathEscape(kid)+"/revoke", nil, nil, &k)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		fmt.Fprintf(w, "Key %s (%s) of account %s is revoked since %s.\n", k.ID, k.Hint, k.AccountID, cliTime(k.RevokedAt))
	})
}

func printKeys(w io.Writer, keys []keyView) {
	tw := cliTable(w)
	fmt.Fprintln(tw, "KEY ID\tNAME\tMODE\tKEY\tSTATUS\tCREATED\tLAST USED\tEXPIRES\tBUDGET DAY\tBUDGET MONTH\tBUDGET TOTAL")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, cliDash(k.Name), k.Mode, k.Hint, k.Status,
			cliTime(k.Created), cliTime(k.LastUsed), cliTime(k.Expires),
			cliBudget(k.BudgetDay, k.Remaining.Day, k.Remaining.DayResets),
			cliBudget(k.BudgetMonth, k.Remaining.Month, k.Remaining.MonthResets),
			cliBudget(k.BudgetTotal, k.Remaining.Total, time.Time{}))
	}
	tw.Flush()
}
