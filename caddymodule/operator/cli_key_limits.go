package operator

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// caddy textgen key limits|roll

// keyLimitsFlags are the flags of 'key limits'; a flag not given leaves its setting as it is.
func keyLimitsFlags(c *cobra.Command) {
	accountFlag(c)
	c.Flags().String("key-id", "", "Id of the key (required; see 'caddy textgen key list')")
	c.Flags().String("name", "", "A new name for the key")
	c.Flags().String("note", "", "A note about the key (\"\" removes it)")
	c.Flags().String("expires", "", "Expiry: an RFC 3339 time or a duration from now (720h, 90d); \"\" removes it")
	c.Flags().Int64("budget-total", 0, "Most credits the key may spend in all (0: no limit)")
	c.Flags().Int64("budget-day", 0, "Most credits the key may spend per UTC day (0: no limit)")
	c.Flags().Int64("budget-month", 0, "Most credits the key may spend per UTC calendar month (0: no limit)")
	c.Flags().String("tools", "", "Comma-separated tool slugs the key may call (\"\": every tool)")
	c.Flags().String("cidrs", "", "Comma-separated client address ranges the key may be used from, IPv4 or IPv6 CIDR (\"\": anywhere)")
}

func cmdKeyLimits(c *cliContext) error {
	id, err := requireAccount(c.fl)
	if err != nil {
		return err
	}
	kid, err := requireString(c.fl, "key-id")
	if err != nil {
		return err
	}
	var req keyLimitsRequest
	str := func(name string) *string {
		if !c.fl.Changed(name) {
			return nil
		}
		v := c.fl.String(name)
		return &v
	}
	num := func(name string) *int64 {
		if !c.fl.Changed(name) {
			return nil
		}
		v, _ := c.fl.GetInt64(name)
		return &v
	}
	list := func(name string) *[]string {
		s := str(name)
		if s == nil {
			return nil
		}
		out := []string{}
		for _, v := range strings.Split(*s, ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
		return &out
	}
	req.Name, req.Note, req.Expires = str("name"), str("note"), str("expires")
	if req.Expires != nil && strings.TrimSpace(*req.Expires) != "" {
		exp, err := parseExpiry(strings.TrimSpace(*req.Expires), time.Now())
		if err != nil {
			return usagef("--expires: %v", err)
		}
		s := exp.Format(time.RFC3339)
		req.Expires = &s
	}
	req.BudgetTotal, req.BudgetDay, req.BudgetMonth = num("budget-total"), num("budget-day"), num("budget-month")
	req.AllowedTools, req.AllowedCIDRs = list("tools"), list("cidrs")
	var k keyView
	raw, err := c.call(http.MethodPost, "/textgen/accounts/"+url.PathEscape(id)+"/keys/"+url.PathEscape(kid)+"/limits", nil, req, &k)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) { printKeyLimits(w, k) })
}

func cmdKeyRoll(c *cliContext) error {
	id, err := requireAccount(c.fl)
	if err != nil {
		return err
	}
	kid, err := requireString(c.fl, "key-id")
	if err != nil {
		return err
	}
	var k createdKey
	raw, err := c.call(http.MethodPost, "/textgen/accounts/"+url.PathEscape(id)+"/keys/"+url.PathEscape(kid)+"/roll", nil,
		rollKeyRequest{Grace: c.fl.String("grace")}, &k)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		fmt.Fprintf(w, "New secret of key %s (shown only this once; store it now):\n\n    %s\n\n", k.ID, k.Key)
		if k.GraceUntil.IsZero() {
			fmt.Fprintln(w, "The previous secret stopped working.")
		} else {
			fmt.Fprintf(w, "The previous secret (…%s) works until %s.\n", k.PreviousLast4, cliTime(k.GraceUntil))
		}
	})
}

// printKeyLimits prints a key's limits and what is left of its budgets.
func printKeyLimits(w io.Writer, k keyView) {
	tw := cliTable(w)
	budget := cliBudget
	fmt.Fprintf(tw, "KEY\t%s (%s)\n", k.ID, k.Hint)
	fmt.Fprintf(tw, "NAME\t%s\nNOTE\t%s\nEXPIRES\t%s\n", cliDash(k.Name), cliDash(k.Note), cliTime(k.Expires))
	fmt.Fprintf(tw, "BUDGET TOTAL\t%s\n", budget(k.BudgetTotal, k.Remaining.Total, time.Time{}))
	fmt.Fprintf(tw, "BUDGET DAY\t%s\n", budget(k.BudgetDay, k.Remaining.Day, k.Remaining.DayResets))
	fmt.Fprintf(tw, "BUDGET MONTH\t%s\n", budget(k.BudgetMonth, k.Remaining.Month, k.Remaining.MonthResets))
	fmt.Fprintf(tw, "TOOLS\t%s\nADDRESSES\t%s\n", cliDash(strings.Join(k.AllowedTools, ", ")), cliDash(strings.Join(k.AllowedCIDRs, ", ")))
	tw.Flush()
}

// cliBudget is what is left of budget b and when it resets, as the server counted it; "no limit"
// when the key has no such budget.
func cliBudget(b int64, left *int64, resets time.Time) string {
	if b == 0 || left == nil {
		return "no limit"
	}
	s := fmt.Sprintf("%d of %d left", *left, b)
	if !resets.IsZero() {
		s += ", resets " + cliTime(resets)
	}
	return s
}
