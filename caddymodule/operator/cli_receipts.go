package operator

import (
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
)

// caddy textgen receipts keys | rotate-key

func cmdReceiptKeys(c *cliContext) error {
	return receiptKeysCall(c, http.MethodGet, "/textgen/receipts/keys")
}

func cmdReceiptRotate(c *cliContext) error {
	return receiptKeysCall(c, http.MethodPost, "/textgen/receipts/rotate-key")
}

func receiptKeysCall(c *cliContext, method, path string) error {
	var res receiptKeysResponse
	raw, err := c.call(method, path, nil, nil, &res)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY ID\tVALID FROM\tVALID UNTIL\tPUBLIC KEY (base64url)")
		for _, k := range res.Keys {
			until := k.ValidUntil
			if k.Current {
				until = "(current)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.KeyID, k.ValidFrom, until, k.PublicKey)
		}
		tw.Flush()
	})
}
