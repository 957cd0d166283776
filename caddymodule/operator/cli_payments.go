package operator

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/caddy-textgen/textgen/ledger"
)

// caddy textgen payments list|resolve|refund

func cmdPaymentsList(c *cliContext) error {
	q := url.Values{}
	all := c.fl.Bool("all")
	if all {
		q.Set("all", "true")
	}
	limit, err := listLimit(c.fl)
	if err != nil {
		return err
	}
	q.Set("limit", strconv.Itoa(limit))
	var pl paymentList
	raw, err := c.call(http.MethodGet, "/textgen/payments", q, nil, &pl)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		defer printReversals(w, pl.Reversals)
		if len(pl.Payments) == 0 {
			if all {
				fmt.Fprintln(w, "No payment has come in that credited nothing.")
			} else {
				fmt.Fprintln(w, "No open unmatched payment: every paid session was credited or resolved.")
			}
			return
		}
		printPayments(w, pl.Payments)
		if !all {
			fmt.Fprintln(w, "\nEach was paid and credited nothing. Check it in Stripe, credit it by hand ('caddy textgen credits grant --reference <reference>') or refund it, then 'caddy textgen payments resolve'.")
		}
	})
}

func cmdPaymentsResolve(c *cliContext) error {
	ref, err := requireString(c.fl, "reference")
	if err != nil {
		return err
	}
	note, err := requireString(c.fl, "note")
	if err != nil {
		return err
	}
	var res resolvedPayment
	raw, err := c.call(http.MethodPost, "/textgen/payments/"+url.PathEscape(ref)+"/resolve", nil, resolvePaymentRequest{Note: note}, &res)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		p := res.Payment
		if res.Repeated {
			fmt.Fprintf(w, "Payment %s was resolved before (%s: %s); nothing changed.\n", p.Reference, cliTime(p.Resolved), p.Resolution)
			return
		}
		fmt.Fprintf(w, "Payment %s is resolved: %s.\n", p.Reference, p.Resolution)
	})
}

func printPayments(w io.Writer, ps []ledger.UnmatchedPayment) {
	tw := cliTable(w)
	fmt.Fprintln(tw, "REFERENCE\tRECEIVED\tACCOUNT\tPACKAGE\tPAID\tPROBLEM\tDETAIL\tRESOLVED")
	for _, p := range ps {
		resolved := "open"
		if !p.Resolved.IsZero() {
			resolved = cliTime(p.Resolved) + ": " + p.Resolution
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Reference, cliTime(p.Created), cliDash(p.AccountID),
			cliDash(p.Package), fmt.Sprintf("%d.%02d %s", p.AmountCents/100, p.AmountCents%100, strings.ToUpper(p.Currency)),
			p.Problem, cliDash(p.Detail), resolved)
	}
	tw.Flush()
}

func cmdPaymentsRefund(c *cliContext) error {
	ref, err := requireString(c.fl, "reference")
	if err != nil {
		return err
	}
	amount, err := c.fl.GetInt64("amount")
	if err != nil {
		return err
	}
	if amount < 0 {
		return fmt.Errorf("--amount %d: give the cents to refund (default: all that is left)", amount)
	}
	var res ledger.ReversalResult
	raw, err := c.call(http.MethodPost, "/textgen/payments/"+url.PathEscape(ref)+"/refund", nil,
		refundRequest{AmountCents: amount, Reason: c.fl.String("reason")}, &res)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		rv := res.Reversal
		fmt.Fprintf(w, "Refund %s of %s of purchase %s: %d credits taken off account %s.\n", rv.ID, cliMoney(rv.AmountCents, rv.Currency),
			ref, rv.Credits, cliDash(rv.AccountID))
		if res.Repeated {
			fmt.Fprintln(w, "(Stripe's event for it had arrived first; nothing was taken twice.)")
		}
	})
}

// printReversals lists refunds and disputes, if any.
func printReversals(w io.Writer, rs []ledger.Reversal) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintln(w, "\nRefunds and disputes:")
	tw := cliTable(w)
	fmt.Fprintln(tw, "ID\tKIND\tPURCHASE\tACCOUNT\tAMOUNT\tCREDITS\tSTATUS\tREASON\tCHANGED")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.Kind, r.Reference, cliDash(r.AccountID),
			cliMoney(r.AmountCents, r.Currency), r.Credits, r.Status, cliDash(r.Reason), cliTime(r.Updated))
	}
	tw.Flush()
}

// cliMoney writes cents of currency as "1.00 EUR".
func cliMoney(cents int64, currency string) string {
	return fmt.Sprintf("%d.%02d %s", cents/100, cents%100, strings.ToUpper(currency))
}
