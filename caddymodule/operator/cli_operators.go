package operator

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/caddy-textgen/textgen/caddymodule/internal/opauth"
)

// caddy textgen operator create|list|remove

func cmdOperatorCreate(c *cliContext) error {
	email, err := requireString(c.fl, "email")
	if err != nil {
		return err
	}
	role, err := requireString(c.fl, "role")
	if err != nil {
		return err
	}
	req := operatorRequest{Email: email, Role: role, Note: c.fl.String("note")}
	if c.fl.Bool("password-stdin") {
		// A password on the command line would be in the shell's history and the process list.
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil && line == "" {
			return usagef("--password-stdin: no password on standard input")
		}
		req.Password = strings.TrimRight(line, "\r\n")
	}
	var en opauth.Enrollment
	raw, err := c.call(http.MethodPost, "/textgen/operators", nil, req, &en)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		fmt.Fprintf(w, "Operator %s (%s) is created, id %s.\n\n", en.Operator.Email, en.Operator.Role, en.Operator.ID)
		fmt.Fprintln(w, "Give these to the operator now: they are shown only this once and kept nowhere in clear.")
		if en.Password != "" {
			fmt.Fprintf(w, "\n  Password:     %s\n", en.Password)
		}
		fmt.Fprintf(w, "\n  TOTP secret:  %s\n  TOTP URL:     %s\n", en.TOTPSecret, en.TOTPURL)
		fmt.Fprintln(w, "\n  Recovery codes (each works once, instead of a TOTP code):")
		for _, code := range en.RecoveryCodes {
			fmt.Fprintf(w, "    %s\n", code)
		}
	})
}

func cmdOperatorList(c *cliContext) error {
	var ol operatorList
	raw, err := c.call(http.MethodGet, "/textgen/operators", nil, nil, &ol)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		if len(ol.Operators) == 0 {
			fmt.Fprintln(w, "No operators. Create one with 'caddy textgen operator create --email <address> --role owner'.")
			return
		}
		tw := cliTable(w)
		fmt.Fprintln(tw, "ID\tEMAIL\tROLE\tCREATED\tRECOVERY CODES LEFT")
		for _, o := range ol.Operators {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", o.ID, o.Email, o.Role, cliTime(o.Created), o.RecoveryCodesLeft)
		}
		tw.Flush()
	})
}

func cmdOperatorRemove(c *cliContext) error {
	id, err := requireString(c.fl, "id")
	if err != nil {
		return err
	}
	raw, err := c.call(http.MethodPost, "/textgen/operators/"+url.PathEscape(id)+"/remove", nil,
		map[string]string{"note": c.fl.String("note")}, nil)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		fmt.Fprintf(w, "Operator %s is removed and logged out; the audit log keeps what it did.\n", id)
	})
}
