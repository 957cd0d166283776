package operator

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// caddy textgen credits grant|adjust

func creditsFlags(c *cliContext, positive bool) (string, grantRequest, error) {
	id, err := requireAccount(c.fl)
	if err != nil {
		return "", grantRequest{}, err
	}
	n, err := c.fl.GetInt64("credits")
	if err != nil {
		return "", grantRequest{}, usagef("--credits: %v", err)
	}
	switch {
	case n == 0:
		return "", grantRequest{}, usagef("--credits is required (a non-zero whole number)")
	case positive && n < 0:
		return "", grantRequest{}, usagef("--credits must be positive for a grant; use 'caddy textgen credits adjust' to remove credits")
	}
	return id, grantRequest{Credits: n, Mode: string(modeFlag(c.fl)), Reference: c.fl.String("reference")}, nil
}

func cmdCreditsGrant(c *cliContext) error {
	id, req, err := creditsFlags(c, true)
	if err != nil {
		return err
	}
	if s := strings.TrimSpace(c.fl.String("expires")); s != "" {
		if req.Mode == string(ledger.Test) {
			return usagef("--expires: test credits do not expire")
		}
		t, err := parseExpires(s, time.Now())
		if err != nil {
			return err
		}
		req.Expires = t.UTC().Format(time.RFC3339)
	}
	return c.credit(id, "credits", req)
}

func cmdCreditsAdjust(c *cliContext) error {
	id, req, err := creditsFlags(c, false)
	if err != nil {
		return err
	}
	if req.Reason, err = requireString(c.fl, "reason"); err != nil {
		return err
	}
	return c.credit(id, "adjust", req)
}

func (c *cliContext) credit(id, route string, req grantRequest) error {
	var res creditsResult
	raw, err := c.call(http.MethodPost, "/textgen/accounts/"+url.PathEscape(id)+"/"+route, nil, req, &res)
	var oe *outcomeError
	if errors.As(err, &oe) {
		// No answer came: say what the server would have said of a grant it cannot account for.
		kind := ledger.KindGrant
		if route == "adjust" {
			kind = ledger.KindAdjustment
		}
		oe.msg = outcomeUnknownMessage(kind, strings.TrimSpace(req.Reference) != "") + " (no answer came from Caddy's admin API)"
	}
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		if res.Repeated {
			fmt.Fprintf(w, "Reference %q was used already (%s, %+d %s credits): nothing was credited this time.\n",
				res.Reference, cliTime(res.Entry.Time), res.Entry.Amount, res.Entry.Mode)
		} else {
			verb := "Granted"
			if res.Kind == ledger.KindAdjustment {
				verb = "Adjusted by"
			}
			fmt.Fprintf(w, "%s %+d %s credits on account %s.\n", verb, res.Credited, res.Mode, res.AccountID)
			if req.Expires != "" {
				fmt.Fprintf(w, "What is left of them expires %s.\n", req.Expires)
			}
		}
		fmt.Fprintf(w, "%s credits now: balance %d, available %d.\n", res.Mode, res.Balance, res.Available)
	})
}
