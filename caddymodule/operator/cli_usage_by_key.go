package operator

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// caddy textgen usage --by-key --account ID [--from] [--to]

func cmdUsageByKey(c *cliContext) error {
	id, err := requireAccount(c.fl)
	if err != nil {
		return err
	}
	q := url.Values{}
	for _, name := range []string{"from", "to"} {
		if v := strings.TrimSpace(c.fl.String(name)); v != "" {
			q.Set(name, v)
		}
	}
	var rep keyUsageReport
	raw, err := c.call(http.MethodGet, "/textgen/accounts/"+url.PathEscape(id)+"/usage/keys", q, nil, &rep)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		if len(rep.Keys) == 0 {
			fmt.Fprintln(w, "No requests in this period.")
			return
		}
		tw := cliTable(w)
		fmt.Fprintln(tw, "KEY ID\tNAME\tLAST 4\tTOOL\tMODE\tREQUESTS\tSETTLED\tVOIDED\tCREDITS")
		for _, k := range rep.Keys {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", k.KeyID, k.Name, k.Last4, k.Tool, k.Mode, k.Requests, k.Settled, k.Voided, k.Credits)
		}
		tw.Flush()
	})
}
