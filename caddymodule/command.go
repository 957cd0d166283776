package caddymodule

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/caddy-textgen/textgen/ledger"
)

// The "caddy textgen ..." commands. Every command but restore is a client of the running
// server's admin API (admin.go): the server holds the Badger directory's lock, so the CLI never
// opens it. restore is the exception by design: it writes a new ledger directory while the
// server is stopped.
//
// Exit codes: 0 success; 1 the operation failed (the server refused it, the server could not be
// reached, an I/O error, or ledger verify found problems); 2 the command line is wrong (a
// missing or malformed flag).

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "textgen",
		Usage: "<account|key|credits|balance|history|usage|ledger|backup|restore> [flags]",
		Short: "Manages caddy-textgen accounts, API keys, credits and the ledger",
		Long: `
Manages the caddy-textgen service through the running server's admin API:
accounts, API keys, credits, usage, ledger verification and backups.

These commands talk to Caddy's admin endpoint (default ` + caddy.DefaultAdminListen + `), never to
the ledger directory, which the running server holds. Use --address, or --config
(with --adapter) to read the admin address from your config, if it is not the default.

With --json a command prints exactly one JSON object on stdout and nothing else;
without it, a readable table. A failed command exits non-zero with the error on
stderr: 1 when the operation failed (or ledger verify found problems), 2 when the
command line is wrong.

'caddy textgen restore' is the one offline command: it loads a backup into a new,
empty ledger directory while the server is stopped.

The admin endpoint can create keys and grant credits: never make it reachable
from the internet.`,
		CobraFunc: buildTextgenCommand,
	})
}

const (
	exitFailed = 1
	exitUsage  = 2
)

// usageError marks a command-line mistake (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// cliFunc is one leaf command. It writes its result to out, and returns an error for failure.
type cliFunc func(c *cliContext) error

// cliContext is what a leaf command gets: its flags, the output, and a lazily made API client.
type cliContext struct {
	fl     caddycmd.Flags
	json   bool
	out    io.Writer
	client *adminClient
}

func (c *cliContext) api() (*adminClient, error) {
	if c.client == nil {
		cl, err := newAdminClient(c.fl)
		if err != nil {
			return nil, err
		}
		c.client = cl
	}
	return c.client, nil
}

// run adapts a cliFunc to caddycmd's (exit code, error) convention.
func cliRun(f cliFunc) func(*cobra.Command, []string) error {
	return caddycmd.WrapCommandFuncForCobra(func(fl caddycmd.Flags) (int, error) {
		c := &cliContext{fl: fl, json: fl.Bool("json"), out: os.Stdout}
		err := f(c)
		var ue usageError
		switch {
		case err == nil:
			return caddy.ExitCodeSuccess, nil
		case errors.As(err, &ue):
			return exitUsage, err
		}
		return exitFailed, err
	})
}

func cliLeaf(use, short string, f cliFunc, flags func(*cobra.Command)) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs, RunE: cliRun(f)}
	if flags != nil {
		flags(cmd)
	}
	return cmd
}

func cliGroup(use, short string, children ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs, RunE: groupHelp}
	cmd.AddCommand(children...)
	return cmd
}

// groupHelp makes a command group runnable, so that cobra rejects a mistyped subcommand
// ("unknown command", exit 1) instead of printing the help and exiting 0; the bare group prints
// its help.
func groupHelp(cmd *cobra.Command, _ []string) error { return cmd.Help() }

func accountFlag(cmd *cobra.Command) {
	cmd.Flags().String("account", "", "Account id (required)")
}

func buildTextgenCommand(cmd *cobra.Command) {
	pf := cmd.PersistentFlags()
	pf.String("address", "", "Address of Caddy's admin API (default "+caddy.DefaultAdminListen+", or the one in --config)")
	pf.StringP("config", "c", "", "Configuration file to read the admin address from (if --address is not used)")
	pf.StringP("adapter", "a", "", "Name of the config adapter for --config")
	pf.String("ledger", "", "Ledger directory: which ledger to use when the server has several open; for restore, the new directory")
	pf.Bool("json", false, "Print one JSON object instead of a table")
	cmd.Args = cobra.NoArgs
	cmd.RunE = groupHelp

	cmd.AddCommand(
		cliGroup("account", "Creates, lists, shows, disables and enables accounts",
			cliLeaf("create", "Creates an account", cmdAccountCreate, func(c *cobra.Command) {
				c.Flags().String("email", "", "Email address of the account holder (required, unique)")
			}),
			cliLeaf("list", "Lists accounts (all of them unless --limit is given)", cmdAccountList, func(c *cobra.Command) {
				c.Flags().Int("limit", 0, "Page size: list one page of at most this many accounts")
				c.Flags().String("cursor", "", "Continue after the page that returned this next_cursor")
			}),
			cliLeaf("get", "Shows an account with its credits and keys", cmdAccountGet, accountFlag),
			cliLeaf("disable", "Disables an account: its keys get 403 account_disabled until it is enabled", cmdAccountStatus("disable"), accountFlag),
			cliLeaf("enable", "Enables a disabled account", cmdAccountStatus("enable"), accountFlag),
		),
		cliGroup("key", "Creates, lists and revokes API keys",
			cliLeaf("create", "Creates an API key; the full key is printed only this once", cmdKeyCreate, func(c *cobra.Command) {
				accountFlag(c)
				c.Flags().Bool("test", false, "Create a test key (tg_test_...): sample text, test credits, never the model")
				c.Flags().String("name", "", "A name for the key, to recognise it later")
				c.Flags().String("expires", "", "Expiry: an RFC 3339 time (2030-01-31T00:00:00Z) or a duration from now (720h, 90d); default never")
			}),
			cliLeaf("list", "Lists an account's keys (never the full keys)", cmdKeyList, accountFlag),
			cliLeaf("revoke", "Revokes a key; it stops working with the next request", cmdKeyRevoke, func(c *cobra.Command) {
				accountFlag(c)
				c.Flags().String("key-id", "", "Id of the key to revoke (required; see key list)")
			}),
		),
		cliGroup("credits", "Grants and adjusts credits",
			cliLeaf("grant", "Grants credits; idempotent on --reference", cmdCreditsGrant, func(c *cobra.Command) {
				accountFlag(c)
				c.Flags().Int64("credits", 0, "Number of credits to grant (required, > 0)")
				c.Flags().String("reference", "", "Unique reference (e.g. an invoice number): the same reference never credits twice")
				c.Flags().Bool("test", false, "Grant test credits (used by test keys) instead of live credits")
			}),
			cliLeaf("adjust", "Adds or removes credits with a reason (a correction)", cmdCreditsAdjust, func(c *cobra.Command) {
				accountFlag(c)
				c.Flags().Int64("credits", 0, "Credits to add (positive) or remove (negative, e.g. --credits=-5); required")
				c.Flags().String("reason", "", "Why (required; stays in the ledger)")
				c.Flags().String("reference", "", "Unique reference: the same reference never applies twice")
				c.Flags().Bool("test", false, "Adjust test credits instead of live credits")
			}),
		),
		cliLeaf("balance", "Shows an account's live and test credits", cmdBalance, accountFlag),
		cliLeaf("history", "Shows an account's ledger entries, newest first", cmdHistory, func(c *cobra.Command) {
			accountFlag(c)
			c.Flags().Int("limit", 50, "Number of entries (at most 1000)")
			c.Flags().String("cursor", "", "Continue after the page that returned this next_cursor")
		}),
		cliLeaf("usage", "Shows requests and credits per tool and per day", cmdUsage, func(c *cobra.Command) {
			c.Flags().String("account", "", "Only this account (default: all)")
			c.Flags().String("from", "", "First day (YYYY-MM-DD, UTC) or RFC 3339 time")
			c.Flags().String("to", "", "Last day, included (YYYY-MM-DD, UTC), or an RFC 3339 time, excluded")
		}),
		cliGroup("ledger", "Checks the ledger",
			cliLeaf("verify", "Checks that every balance equals the sum of its entries; exits 1 when not", cmdVerify, nil),
		),
		cliLeaf("backup", "Downloads an online backup of the ledger from the running server", cmdBackup, func(c *cobra.Command) {
			c.Flags().StringP("output", "o", "", "File to write the backup to (required; replaced atomically)")
		}),
		cliLeaf("restore", "Loads a backup into a new, empty ledger directory (offline: the server must not use it)", cmdRestore, func(c *cobra.Command) {
			c.Flags().StringP("input", "i", "", "Backup file written by 'caddy textgen backup' (required)")
		}),
	)
}

// --- flags ---

func requireString(fl caddycmd.Flags, name string) (string, error) {
	v := strings.TrimSpace(fl.String(name))
	if v == "" {
		return "", usagef("--%s is required", name)
	}
	return v, nil
}

func requireAccount(fl caddycmd.Flags) (string, error) { return requireString(fl, "account") }

func modeFlag(fl caddycmd.Flags) ledger.Mode {
	if fl.Bool("test") {
		return ledger.Test
	}
	return ledger.Live
}

// --- accounts ---

func cmdAccountCreate(c *cliContext) error {
	email, err := requireString(c.fl, "email")
	if err != nil {
		return err
	}
	var acct ledger.Account
	raw, err := c.call(http.MethodPost, "/textgen/accounts", nil, map[string]string{"email": email}, &acct)
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
		fmt.Fprintln(w)
		printBalance(w, d.Credits)
		fmt.Fprintln(w)
		printKeys(w, d.Keys)
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

// --- keys ---

func cmdKeyCreate(c *cliContext) error {
	id, err := requireAccount(c.fl)
	if err != nil {
		return err
	}
	req := createKeyRequest{Mode: string(modeFlag(c.fl)), Name: c.fl.String("name")}
	if s := strings.TrimSpace(c.fl.String("expires")); s != "" {
		exp, err := parseExpiry(s, time.Now())
		if err != nil {
			return usagef("--expires: %v", err)
		}
		req.Expires = exp.Format(time.RFC3339)
	}
	var k createdKey
	raw, err := c.call(http.MethodPost, "/textgen/accounts/"+url.PathEscape(id)+"/keys", nil, req, &k)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		fmt.Fprintf(w, "API key (shown only this once; store it now):\n\n    %s\n\n", k.Key)
		printKeys(w, []keyView{k.keyView})
	})
}

func cmdKeyList(c *cliContext) error {
	id, err := requireAccount(c.fl)
	if err != nil {
		return err
	}
	var kl keyList
	raw, err := c.call(http.MethodGet, "/textgen/accounts/"+url.PathEscape(id)+"/keys", nil, nil, &kl)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) { printKeys(w, kl.Keys) })
}

func cmdKeyRevoke(c *cliContext) error {
	id, err := requireAccount(c.fl)
	if err != nil {
		return err
	}
	kid, err := requireString(c.fl, "key-id")
	if err != nil {
		return err
	}
	var k keyView
	raw, err := c.call(http.MethodPost, "/textgen/accounts/"+url.PathEscape(id)+"/keys/"+url.PathEscape(kid)+"/revoke", nil, nil, &k)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		fmt.Fprintf(w, "Key %s (%s) of account %s is revoked since %s.\n", k.ID, k.Hint, k.AccountID, cliTime(k.RevokedAt))
	})
}

func printKeys(w io.Writer, keys []keyView) {
	tw := cliTable(w)
	fmt.Fprintln(tw, "KEY ID\tNAME\tMODE\tKEY\tSTATUS\tCREATED\tLAST USED\tEXPIRES")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, cliDash(k.Name), k.Mode, k.Hint, k.Status,
			cliTime(k.Created), cliTime(k.LastUsed), cliTime(k.Expires))
	}
	tw.Flush()
}

// --- credits ---

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
		}
		fmt.Fprintf(w, "%s credits now: balance %d, available %d.\n", res.Mode, res.Balance, res.Available)
	})
}

func cmdBalance(c *cliContext) error {
	id, err := requireAccount(c.fl)
	if err != nil {
		return err
	}
	var b ledger.Balance
	raw, err := c.call(http.MethodGet, "/textgen/accounts/"+url.PathEscape(id)+"/balance", nil, nil, &b)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) { printBalance(w, b) })
}

func printBalance(w io.Writer, b ledger.Balance) {
	tw := cliTable(w)
	fmt.Fprintln(tw, "CREDITS\tBALANCE\tAVAILABLE")
	fmt.Fprintf(tw, "live\t%d\t%d\n", b.Balance, b.Available)
	fmt.Fprintf(tw, "test\t%d\t%d\n", b.TestBalance, b.TestAvailable)
	tw.Flush()
}

func cmdHistory(c *cliContext) error {
	id, err := requireAccount(c.fl)
	if err != nil {
		return err
	}
	limit := c.fl.Int("limit")
	if limit < 1 || limit > 1000 {
		return usagef("--limit must be from 1 to 1000")
	}
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if cur := c.fl.String("cursor"); cur != "" {
		q.Set("cursor", cur)
	}
	var el entryList
	raw, err := c.call(http.MethodGet, "/textgen/accounts/"+url.PathEscape(id)+"/ledger", q, nil, &el)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		tw := cliTable(w)
		fmt.Fprintln(tw, "SEQ\tTIME\tKIND\tMODE\tAMOUNT\tBALANCE\tAVAILABLE\tDETAIL")
		for _, e := range el.Entries {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%+d\t%d\t%d\t%s\n", e.Seq, cliTime(e.Time), e.Kind, e.Mode,
				e.Amount, e.BalanceAfter, e.AvailableAfter, entryDetail(e))
		}
		tw.Flush()
		if el.NextCursor != "" {
			fmt.Fprintf(w, "\nOlder entries: --cursor %s\n", el.NextCursor)
		}
	})
}

func entryDetail(e ledger.Entry) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	add("tool", e.Tool)
	add("request", e.RequestID)
	add("key", e.KeyID)
	add("reference", e.Reference)
	add("reason", e.Reason)
	if e.AmountCents != 0 {
		add("paid", fmt.Sprintf("%d.%02d %s", e.AmountCents/100, e.AmountCents%100, e.Currency))
	}
	return cliDash(strings.Join(parts, " "))
}

// --- usage ---

func cmdUsage(c *cliContext) error {
	q := url.Values{}
	for _, name := range []string{"account", "from", "to"} {
		if v := strings.TrimSpace(c.fl.String(name)); v != "" {
			q.Set(name, v)
		}
	}
	var rep usageReport
	raw, err := c.call(http.MethodGet, "/textgen/usage", q, nil, &rep)
	if err != nil {
		return err
	}
	return c.print(raw, func(w io.Writer) {
		if len(rep.Rows) == 0 {
			fmt.Fprintln(w, "No requests in this period.")
			return
		}
		tw := cliTable(w)
		fmt.Fprintln(tw, "DAY\tTOOL\tMODE\tREQUESTS\tSETTLED\tVOIDED")
		for _, r := range rep.Rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\n", r.Day, r.Tool, r.Mode, r.Requests, r.Settled, r.Voided)
		}
		tw.Flush()
		fmt.Fprintln(w)
		tw = cliTable(w)
		fmt.Fprintln(tw, "TOOL\tMODE\tREQUESTS\tSETTLED\tVOIDED")
		for _, s := range rep.ByTool {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", s.Tool, s.Mode, s.Requests, s.Settled, s.Voided)
		}
		for _, s := range rep.Total {
			fmt.Fprintf(tw, "TOTAL\t%s\t%d\t%d\t%d\n", s.Mode, s.Requests, s.Settled, s.Voided)
		}
		tw.Flush()
	})
}

// --- ledger ---

func cmdVerify(c *cliContext) error {
	var rep ledger.VerifyReport
	raw, err := c.call(http.MethodGet, "/textgen/ledger/verify", nil, nil, &rep)
	if err != nil {
		return err
	}
	if err := c.print(raw, func(w io.Writer) {
		if rep.OK {
			fmt.Fprintf(w, "ok: %d accounts, %d entries; every balance equals the sum of its entries.\n", rep.Accounts, rep.Entries)
			return
		}
		fmt.Fprintf(w, "NOT OK: %d problems in %d accounts, %d entries.\n\n", len(rep.Problems), rep.Accounts, rep.Entries)
		tw := cliTable(w)
		fmt.Fprintln(tw, "ACCOUNT\tPROBLEM\tDETAIL")
		for _, p := range rep.Problems {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", cliDash(p.AccountID), p.Kind, p.Detail)
		}
		tw.Flush()
	}); err != nil {
		return err
	}
	if !rep.OK {
		return fmt.Errorf("ledger verify found %d problems", len(rep.Problems))
	}
	return nil
}

// backupResult is what backup prints.
type backupResult struct {
	Output string `json:"output"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

func cmdBackup(c *cliContext) error {
	out, err := requireString(c.fl, "output")
	if err != nil {
		return err
	}
	api, err := c.api()
	if err != nil {
		return err
	}
	// Write next to the target and rename at the end, so that an interrupted download never
	// leaves a file that looks like a backup.
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".part-*")
	if err != nil {
		return fmt.Errorf("creating the backup file: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()

	resp, err := api.request(context.Background(), http.MethodGet, "/textgen/backup", nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, sum), resp.Body)
	if err != nil {
		return fmt.Errorf("downloading the backup: %w (nothing was written to %s)", err, out)
	}
	got := hex.EncodeToString(sum.Sum(nil))
	if want := resp.Trailer.Get(backupChecksumTrailer); want == "" {
		return fmt.Errorf("the backup download ended without its checksum: it is incomplete (nothing was written to %s)", out)
	} else if want != got {
		return fmt.Errorf("the backup download is corrupt: sha256 %s, the server sent %s (nothing was written to %s)", got, want, out)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writing the backup: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the backup: %w", err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return fmt.Errorf("writing the backup: %w", err)
	}
	res := backupResult{Output: out, Bytes: n, SHA256: got}
	return c.printValue(res, func(w io.Writer) {
		fmt.Fprintf(w, "Wrote the ledger backup to %s (%d bytes, sha256 %s).\n", out, n, got)
	})
}

// restoreResult is what restore prints.
type restoreResult struct {
	Restored bool   `json:"restored"`
	Input    string `json:"input"`
	Ledger   string `json:"ledger"`
	Bytes    int64  `json:"bytes"`
}

func cmdRestore(c *cliContext) error {
	in, err := requireString(c.fl, "input")
	if err != nil {
		return err
	}
	dir, err := requireString(c.fl, "ledger")
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("ledger directory %s: %w", dir, err)
	}
	// Checked here as well as in ledger.Restore, to say what to do: a restore never mixes a
	// backup into a ledger, and an empty directory cannot be one a running server holds.
	entries, err := os.ReadDir(abs)
	switch {
	case err == nil && len(entries) > 0:
		return fmt.Errorf("refusing to restore into %s: the directory is not empty; restore into a new, empty directory with the server stopped, then point the textgen ledger at it", abs)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("ledger directory %s: %w", abs, err)
	}
	f, err := os.Open(in)
	if err != nil {
		return fmt.Errorf("opening the backup: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("opening the backup: %w", err)
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory, not a backup file", in)
	}
	if err := ledger.Restore(abs, f); err != nil {
		return fmt.Errorf("restoring %s into %s: %w", in, abs, err)
	}
	res := restoreResult{Restored: true, Input: in, Ledger: abs, Bytes: fi.Size()}
	return c.printValue(res, func(w io.Writer) {
		fmt.Fprintf(w, "Restored %s into %s.\nPoint the textgen handler's ledger at this directory, start Caddy, and run 'caddy textgen ledger verify'.\n", in, abs)
	})
}

// --- output ---

// print writes the server's JSON response (with --json) or the table.
func (c *cliContext) print(raw json.RawMessage, tableFn func(io.Writer)) error {
	if c.json {
		var buf bytes.Buffer
		if err := json.Indent(&buf, bytes.TrimSpace(raw), "", "  "); err != nil {
			return fmt.Errorf("the admin API sent invalid JSON: %w", err)
		}
		buf.WriteByte('\n')
		_, err := c.out.Write(buf.Bytes())
		return err
	}
	tableFn(c.out)
	return nil
}

func (c *cliContext) printValue(v any, tableFn func(io.Writer)) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.print(raw, tableFn)
}

func cliTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

func cliTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func cliDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// --- the admin API client ---

// adminClient calls the textgen routes of Caddy's admin API the way caddycmd.AdminAPIRequest
// does (TCP or unix socket, Origin header), but reads the API's JSON errors into plain messages.
type adminClient struct {
	addr      string // as given, for messages
	origin    string
	setOrigin bool // as caddycmd does: not over a unix socket, where the host check is off
	ledger    string
	http      *http.Client
}

func newAdminClient(fl caddycmd.Flags) (*adminClient, error) {
	addr, err := caddycmd.DetermineAdminAPIAddress(fl.String("address"), nil, fl.String("config"), fl.String("adapter"))
	if err != nil {
		return nil, usagef("finding the admin API address: %v", err)
	}
	na, err := caddy.ParseNetworkAddress(addr)
	if err != nil || na.PortRangeSize() > 1 {
		return nil, usagef("invalid admin API address %q (want HOST:PORT or unix//path)", addr)
	}
	network, dialAddr := na.Network, na.JoinHostPort(0)
	origin, setOrigin := "http://"+dialAddr, true
	switch {
	case na.IsUnixNetwork():
		dialAddr, _, _ = strings.Cut(na.Host, "|") // drop the socket's permission bits
		origin, setOrigin = "http://127.0.0.1", false
	case na.IsFdNetwork():
		return nil, usagef("the admin API address %q is a file descriptor; use --address HOST:PORT", addr)
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	return &adminClient{
		addr:      addr,
		origin:    origin,
		setOrigin: setOrigin,
		ledger:    fl.String("ledger"),
		http: &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, network, dialAddr)
			},
		}},
	}, nil
}

// adminAPIError is an error answer of the admin API.
type adminAPIError struct {
	Status  int
	Message string
}

func (e *adminAPIError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("the admin API answered %d %s", e.Status, http.StatusText(e.Status))
	}
	return e.Message
}

// request sends one request; an answer >= 400 becomes an *adminAPIError.
func (a *adminClient) request(ctx context.Context, method, path string, q url.Values, body any) (*http.Response, error) {
	if a.ledger != "" {
		if q == nil {
			q = url.Values{}
		}
		q.Set("ledger", a.ledger)
	}
	u := a.origin + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if a.setOrigin {
		req.Header.Set("Origin", a.origin)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach Caddy's admin API at %s (is Caddy running? set --address or --config): %w", a.addr, err)
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var eb struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
			eb.Error = strings.TrimSpace(string(b))
			if resp.StatusCode == http.StatusNotFound && strings.HasPrefix(path, adminPrefix) && !strings.Contains(eb.Error, "textgen") {
				eb.Error = "the server at " + a.addr + " has no textgen admin API: is it a Caddy built with caddy-textgen? (" + eb.Error + ")"
			}
		}
		return nil, &adminAPIError{Status: resp.StatusCode, Message: eb.Error}
	}
	return resp, nil
}

// call sends a request and returns the JSON answer, also decoded into out.
func (c *cliContext) call(method, path string, q url.Values, body, out any) (json.RawMessage, error) {
	api, err := c.api()
	if err != nil {
		return nil, err
	}
	resp, err := api.request(context.Background(), method, path, q, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the admin API's answer: %w", err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return nil, fmt.Errorf("the admin API's answer is not what this command expects (%v): %s", err, bytes.TrimSpace(raw))
		}
	}
	return raw, nil
}
