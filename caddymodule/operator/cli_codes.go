package operator

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// caddy textgen code create|list|disable|redemptions

func cmdCodeCreate(c *cliContext) error {
	credits, err := c.fl.GetInt64("credits")
	if err != nil {
		return usagef("--credits: %v", err)
	}
	if credits < 1 || credits > ledger.MaxCodeCredits {
		return usagef("--credits is required: the live credits the code gives, from 1 to %d", ledger.MaxCodeCredits)
	}
	uses, err := c.fl.GetInt64("uses")
	if err != nil {
		return usagef("--uses: %v", err)
	}
	if uses < 1 || uses > ledger.MaxCodeUses {
		return usagef("--uses must be from 1 to %d", ledger.MaxCodeUses)
	}
	req := codeCreateRequest{Credits: credits, Uses: uses, Note: c.fl.String("note")}
	if s := strings.TrimSpace(c.fl.String("expires")); s != "" {
		t, err := parseExpires(s, time.Now())
		if err != nil {
			return err
		}
		req.Expires = t.UTC().Format(time.RFC3339)
	}
	var res codeCreated
	raw, err := c.call(http.MethodPost, "/textgen/codes", nil, req, &res)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		fmt.Fprintf(w, "Code: %s\n\n", res.Code)
		fmt.Fprintf(w, "It is shown only now: the ledger keeps its digest, not the code.\n")
		fmt.Fprintf(w, "Id %s: %d live credits for each of up to %d accounts, once each; expires %s.\n",
			res.ID, res.Credits, res.MaxUses, cliExpires(res.Expires))
		fmt.Fprintf(w, "Customers redeem it in My Account or with POST /api/v1/credits/redeem.\n")
	})
}

// parseExpires reads --expires: a time from now ("90d", "36h", "1h30m") or an RFC 3339 time.
func parseExpires(s string, t time.Time) (time.Time, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 {
			return t.Add(time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return t.Add(d), nil
	}
	if at, err := time.Parse(time.RFC3339, s); err == nil {
		if !at.After(t) {
			return time.Time{}, usagef("--expires %s is not in the future", s)
		}
		return at, nil
	}
	return time.Time{}, usagef("--expires %q is neither a time from now (90d, 36h) nor an RFC 3339 time (2026-12-31T23:59:59Z)", s)
}

func cliExpires(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return cliTime(t)
}

func cmdCodeList(c *cliContext) error {
	limit, err := listLimit(c.fl)
	if err != nil {
		return err
	}
	var res codeList
	raw, err := c.call(http.MethodGet, "/textgen/codes", url.Values{"limit": {strconv.Itoa(limit)}}, nil, &res)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		if len(res.Codes) == 0 {
			fmt.Fprintln(w, "No code yet: 'caddy textgen code create --credits N' makes one.")
			return
		}
		tw := cliTable(w)
		fmt.Fprintln(tw, "ID\tENDS IN\tCREDITS\tUSED\tSTATE\tEXPIRES\tCREATED\tNOTE")
		for _, cd := range res.Codes {
			fmt.Fprintf(tw, "%s\t...%s\t%d\t%d/%d\t%s\t%s\t%s\t%s\n", cd.ID, cd.Last4, cd.Credits, cd.Uses, cd.MaxUses, cd.State,
				cliExpires(cd.Expires), cliTime(cd.Created), cliDash(cd.Note))
		}
		tw.Flush()
	})
}

// codeID is the code a command acts on: its argument or --id.
func (c *cliContext) codeID() (string, error) {
	flag := strings.TrimSpace(c.fl.String("id"))
	var arg string
	if len(c.args) > 0 {
		arg = strings.TrimSpace(c.args[0])
	}
	switch {
	case arg != "" && flag != "" && arg != flag:
		return "", usagef("the argument %s and --id %s name different codes; give one", arg, flag)
	case arg != "":
		return arg, nil
	case flag != "":
		return flag, nil
	}
	return "", usagef("name the code: its id (code_...) as the argument or with --id; see 'caddy textgen code list'")
}

func cmdCodeDisable(c *cliContext) error {
	id, err := c.codeID()
	if err != nil {
		return err
	}
	var res codeView
	raw, err := c.call(http.MethodPost, "/textgen/codes/"+url.PathEscape(id)+"/disable", nil,
		map[string]string{"note": c.fl.String("note")}, &res)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		fmt.Fprintf(w, "Code %s is disabled (since %s): it can no longer be redeemed. It was redeemed %d of %d times; those credits stay.\n",
			res.ID, cliTime(res.Disabled), res.Uses, res.MaxUses)
	})
}

func cmdCodeRedemptions(c *cliContext) error {
	id, err := c.codeID()
	if err != nil {
		return err
	}
	limit, err := listLimit(c.fl)
	if err != nil {
		return err
	}
	var res codeRedemptions
	raw, err := c.call(http.MethodGet, "/textgen/codes/"+url.PathEscape(id)+"/redemptions",
		url.Values{"limit": {strconv.Itoa(limit)}}, nil, &res)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		cd := res.Code
		fmt.Fprintf(w, "Code %s (...%s): %d credits, redeemed %d of %d times, %s.\n", cd.ID, cd.Last4, cd.Credits, cd.Uses, cd.MaxUses, cd.State)
		if len(res.Redemptions) == 0 {
			fmt.Fprintln(w, "No account has redeemed it.")
			return
		}
		tw := cliTable(w)
		fmt.Fprintln(tw, "REDEEMED\tACCOUNT\tEMAIL\tCREDITS\tENTRY")
		for _, r := range res.Redemptions {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", cliTime(r.Time), r.AccountID, cliDash(r.Email), r.Credits, r.Seq)
		}
		tw.Flush()
	})
}
