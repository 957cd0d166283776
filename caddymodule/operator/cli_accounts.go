package operator

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/caddy-textgen/textgen/ledger"
)

// caddy textgen account create|list|get|disable|enable

func cmdAccountCreate(c *cliContext) error {
	email, err := requireString(c.fl, "email")
	if err != nil {
		return err
	}
	req := createAccountRequest{Email: email}
	if c.fl.Changed("test-credits") {
		n := int64(c.fl.Int("test-credits"))
		req.TestCredits = &n
	}
	var acct ledger.Account
	raw, err := c.call(http.MethodPost, "/textgen/accounts", nil, req, &acct)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		fmt.Fprintf(w, "Created account %s for %s.\n\n", acct.ID, acct.Email)
		printAccount(w, acct)
		fmt.Fprintf(w, "\nNext: caddy textgen key create --account %s --name <name>\n", acct.ID)
	})
}

func cmdAccountList(c *cliContext) error {
	limit := c.fl.Int("limit")
	if limit < 0 || limit > 1000 {
		return usagef("--limit must be from 1 to 1000")
	}
	q := url.Values{}
	if cur := c.fl.String("cursor"); cur != "" {
		q.Set("cursor", cur)
	}
	all := accountList{Accounts: []ledger.Account{}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
		if _, err := c.call(http.MethodGet, "/textgen/accounts", q, nil, &all); err != nil {
			return err
		}
	} else {
		// every page, as big as the server allows
		q.Set("limit", "1000")
		for {
			var page accountList
			if _, err := c.call(http.MethodGet, "/textgen/accounts", q, nil, &page); err != nil {
				return err
			}
			all.Accounts = append(all.Accounts, page.Accounts...)
			if page.NextCursor == "" || page.NextCursor == q.Get("cursor") {
				break
			}
			q.Set("cursor", page.NextCursor)
		}
	}
	return c.printValue(all, func(w io.Writer) {
		tw := cliTable(w)
		fmt.Fprintln(tw, "ID\tEMAIL\tSTATUS\tCREATED")
		for _, a := range all.Accounts {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.ID, a.Email, a.Status, cliTime(a.Created))
		}
		tw.Flush()
		if all.NextCursor != "" {
			fmt.Fprintf(w, "\nMore: --cursor %s\n", all.NextCursor)
		}
	})
}

func cmdAccountGet(c *cliContext) error {
	id, err := requireAccount(c.fl)
	if err != nil {
		return err
	}
	var d accountDetail
	raw, err := c.call(http.MethodGet, "/textgen/accounts/"+url.PathEscape(id), nil, nil, &d)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		printAccount(w, d.Account)
		if d.Disputed {
			fmt.Fprintln(w, "DISPUTED: a payment of this account is disputed (open) or was taken back by its bank (lost); see below.")
		}
		fmt.Fprintln(w)
		printBalance(w, d.Credits)
		fmt.Fprintln(w)
		printKeys(w, d.Keys)
		printReversals(w, d.Disputes)
	})
}

func cmdAccountStatus(action string) cliFunc {
	return func(c *cliContext) error {
		id, err := requireAccount(c.fl)
		if err != nil {
			return err
		}
		var acct ledger.Account
		raw, err := c.call(http.MethodPost, "/textgen/accounts/"+url.PathEscape(id)+"/"+action, nil, nil, &acct)
		if err != nil {
			return err
		}
		return c.print(raw, func(w io.Writer) {
			fmt.Fprintf(w, "Account %s (%s) is %s.\n", acct.ID, acct.Email, acct.Status)
		})
	}
}

func printAccount(w io.Writer, a ledger.Account) {
	tw := cliTable(w)
	fmt.Fprintf(tw, "ID\t%s\n", a.ID)
	fmt.Fprintf(tw, "EMAIL\t%s\n", a.Email)
	fmt.Fprintf(tw, "STATUS\t%s\n", a.Status)
	fmt.Fprintf(tw, "CREATED\t%s\n", cliTime(a.Created))
	tw.Flush()
}
