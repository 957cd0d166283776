package operator

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// caddy textgen mail list|drop

func cmdMailList(c *cliContext) error {
	limit, err := listLimit(c.fl)
	if err != nil {
		return err
	}
	var ml mailList
	raw, err := c.call(http.MethodGet, "/textgen/mail", url.Values{"limit": {strconv.Itoa(limit)}}, nil, &ml)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		if len(ml.Messages) == 0 {
			fmt.Fprintln(w, "The outbox is empty.")
			return
		}
		printMail(w, ml.Messages)
		fmt.Fprintln(w, "\nEach is retried until it goes out or its link expires. To give up on one (an address that can never receive it): 'caddy textgen mail drop --id <id>'.")
	})
}

func cmdMailDrop(c *cliContext) error {
	id, err := requireString(c.fl, "id")
	if err != nil {
		return err
	}
	var res droppedMail
	raw, err := c.call(http.MethodPost, "/textgen/mail/"+url.PathEscape(id)+"/drop", nil, nil, &res)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		fmt.Fprintf(w, "E-mail %s is dropped: no sender will try it again.\n", res.Dropped)
	})
}

// maxMailErrorCell is how much of a delivery error the table shows; --json has all of it.
const maxMailErrorCell = 100

func printMail(w io.Writer, ms []mailView) {
	tw := cliTable(w)
	fmt.Fprintln(tw, "ID\tKIND\tACCOUNT\tQUEUED\tATTEMPTS\tNEXT ATTEMPT\tLAST ERROR")
	for _, m := range ms {
		next := cliTime(m.NextAttempt)
		if m.Sending {
			next = "sending now"
		}
		// An SMTP error may span lines or hold tabs, which would break the table.
		lastErr := strings.Join(strings.Fields(m.LastError), " ")
		if r := []rune(lastErr); len(r) > maxMailErrorCell {
			lastErr = string(r[:maxMailErrorCell-1]) + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", m.ID, cliDash(m.Kind), cliDash(m.AccountID), cliTime(m.Created),
			m.Attempts, next, cliDash(lastErr))
	}
	tw.Flush()
}
