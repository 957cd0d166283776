package operator

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// caddy textgen account invite --account ID

func cmdAccountInvite(c *cliContext) error {
	id, err := requireAccount(c.fl)
	if err != nil {
		return err
	}
	var res inviteResponse
	raw, err := c.call(http.MethodPost, "/textgen/accounts/"+url.PathEscape(id)+"/invite", nil, nil, &res)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		if res.Mailed {
			fmt.Fprintf(w, "Invitation e-mailed to %s (account %s).\n", res.Email, res.AccountID)
		} else {
			fmt.Fprintf(w, "No e-mail sent (textgen_account has no smtp): give %s this link yourself", res.Email)
			if len(res.Link) > 0 && res.Link[0] == '/' {
				fmt.Fprint(w, ", after the site's address (set public_url to get whole links)")
			}
			fmt.Fprintln(w, ".")
		}
		fmt.Fprintf(w, "\nLink (works once, for 7 days): %s\n", res.Link)
	})
}
