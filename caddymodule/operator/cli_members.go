package operator

import (
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/caddy-textgen/textgen/ledger"
)

// caddy textgen member list|organise|add|remove|role|cap|usage

func memberPath(c *cliContext, rest string) (string, error) {
	id, err := requireAccount(c.fl)
	if err != nil {
		return "", err
	}
	return "/textgen/accounts/" + url.PathEscape(id) + rest, nil
}

func memberFlag(c *cobra.Command) {
	accountFlag(c)
	c.Flags().String("member", "", "Id of the member's own account (required; see 'caddy textgen member list')")
}

func cmdMemberList(c *cliContext) error {
	p, err := memberPath(c, "/members")
	if err != nil {
		return err
	}
	var ml memberList
	raw, err := c.call(http.MethodGet, p, nil, nil, &ml)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) { printMembers(w, ml) })
}

func cmdMemberOrganise(c *cliContext) error {
	p, err := memberPath(c, "/organisation")
	if err != nil {
		return err
	}
	var ml memberList
	raw, err := c.call(http.MethodPost, p, nil, nil, &ml)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		fmt.Fprintf(w, "Account %s is an organisation; its credits and keys are its members'.\n\n", ml.AccountID)
		printMembers(w, ml)
	})
}

func cmdMemberAdd(c *cliContext) error {
	p, err := memberPath(c, "/members")
	if err != nil {
		return err
	}
	mid, err := requireString(c.fl, "member")
	if err != nil {
		return err
	}
	var m ledger.Membership
	raw, err := c.call(http.MethodPost, p, nil, addMemberRequest{Member: mid, Role: ledger.Role(c.fl.String("role"))}, &m)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		fmt.Fprintf(w, "%s (%s) is a member of %s as %s.\n", m.Email, m.MemberID, m.OrgID, m.Role)
	})
}

// memberAction is a command on one member: remove, role, cap.
func memberAction(c *cliContext, action string, body any, out any) (raw []byte, err error) {
	mid, err := requireString(c.fl, "member")
	if err != nil {
		return nil, err
	}
	p, err := memberPath(c, "/members/"+url.PathEscape(mid)+"/"+action)
	if err != nil {
		return nil, err
	}
	return c.call(http.MethodPost, p, nil, body, out)
}

func cmdMemberRemove(c *cliContext) error {
	var res removedMember
	raw, err := memberAction(c, "remove", nil, &res)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		fmt.Fprintf(w, "%s is no longer a member of %s; %d of its keys are revoked.\n", res.MemberID, res.AccountID, len(res.RevokedKeys))
	})
}

func cmdMemberRole(c *cliContext) error {
	role, err := requireString(c.fl, "role")
	if err != nil {
		return err
	}
	var m ledger.Membership
	raw, err := memberAction(c, "role", roleRequest{Role: ledger.Role(role)}, &m)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) { fmt.Fprintf(w, "%s is %s of %s.\n", m.Email, m.Role, m.OrgID) })
}

func cmdMemberCap(c *cliContext) error {
	n, err := c.fl.GetInt64("monthly-cap")
	if err != nil || !c.fl.Changed("monthly-cap") {
		return usagef("--monthly-cap is required (0: no cap)")
	}
	var m ledger.Membership
	raw, err := memberAction(c, "cap", capRequest{MonthlyCap: &n}, &m)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		fmt.Fprintf(w, "%s: monthly cap %s, %d used this month.\n", m.Email, capText(m.MonthlyCap), m.Used)
	})
}

func cmdMemberUsage(c *cliContext) error {
	p, err := memberPath(c, "/members/usage")
	if err != nil {
		return err
	}
	q := url.Values{}
	for _, f := range []string{"from", "to"} {
		if v := c.fl.String(f); v != "" {
			q.Set(f, v)
		}
	}
	var mu memberUsage
	raw, err := c.call(http.MethodGet, p, q, nil, &mu)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		tw := cliTable(w)
		fmt.Fprintln(tw, "MONTH\tMEMBER\tEMAIL\tCREDITS")
		for _, u := range mu.Usage {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", u.Month, u.MemberID, cliDash(u.Email), u.Credits)
		}
		tw.Flush()
	})
}

func capText(n int64) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprint(n)
}

func printMembers(w io.Writer, ml memberList) {
	if !ml.Organisation {
		fmt.Fprintf(w, "Account %s is a personal account (no members); 'caddy textgen member organise' makes it an organisation.\n", ml.AccountID)
		return
	}
	tw := cliTable(w)
	fmt.Fprintln(tw, "MEMBER\tEMAIL\tROLE\tMONTHLY CAP\tUSED THIS MONTH\tSINCE")
	for _, m := range ml.Members {
		role := string(m.Role)
		if m.Pending {
			role += " (invited)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", m.MemberID, m.Email, role, capText(m.MonthlyCap), m.Used, cliTime(m.Created))
	}
	tw.Flush()
}
