package operator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/caddy-textgen/textgen/ledger"
)

// The "caddy textgen ..." commands. Every command but restore is a client of the running
// server's admin API (module.go): the server holds the Badger directory's lock, so the CLI never
// opens it. restore is the exception by design: it writes a new ledger directory while the
// server is stopped.
//
// Exit codes: 0 success; 1 the operation failed (the server refused it, the server could not be
// reached, an I/O error, or ledger verify found problems); 2 the command line is wrong (a
// missing, malformed or unknown flag, or an argument where none is taken). Without --json an
// error is one line on stderr, "error: <message>".

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "textgen",
		Usage: "<account|key|member|credits|code|balance|history|usage|ledger|payments|mail|receipts|operator|backup|restore|stripe> [flags]",
		Short: "Manages caddy-textgen accounts, API keys, credits and the ledger",
		Long: `
Manages the caddy-textgen service through the running server's admin API:
accounts, API keys, credits, usage, ledger verification and backups.

These commands talk to Caddy's admin endpoint (default ` + caddy.DefaultAdminListen + `), never to
the ledger directory, which the running server holds. Use --address, or --config
(with --adapter) to read the admin address from your config, if it is not the default.

With --json a command prints exactly one JSON object on stdout and nothing else;
without it, a readable table. A failed command exits non-zero with the error on
stderr (without --json, one line "error: ..."): 1 when the operation failed (or
ledger verify found problems), 2 when the command line is wrong, 3 when a change
was sent but its outcome is unknown (it may have been made: the message says
whether retrying is safe).

'caddy textgen ledger verify', 'ledger migrate', 'backup' and 'restore' show
their progress on stderr, never on stdout: a bar on a terminal, else a line
every 5 seconds once they have run that long. --quiet turns it off.

'caddy textgen restore' is the one offline command: it loads a backup into a new,
empty ledger directory while the server is stopped.

The admin endpoint can create keys and grant credits: never make it reachable
from the internet.`,
		CobraFunc: buildTextgenCommand,
	})
}

const (
	exitFailed  = 1
	exitUsage   = 2
	exitUnknown = 3 // a write's outcome is unknown (errOutcomeUnknown)
)

// errOutcomeUnknown marks a write that the server may or may not have made: its answer says so,
// or it was sent and no answer came (exit 3).
var errOutcomeUnknown = errors.New(outcomeUnknownPrefix)

// usageError marks a command-line mistake (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// cliFunc is one leaf command. It writes its result to out, and returns an error for failure.
type cliFunc func(c *cliContext) error

// cliContext is what a leaf command gets: its flags, the output, and a lazily made API client.
type cliContext struct {
	fl     caddycmd.Flags
	args   []string // positional arguments of a command that takes them (cliLeafArg)
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

// cliRun runs a leaf command and ends it with its exit code.
func cliRun(f cliFunc) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		fl := caddycmd.Flags{FlagSet: cmd.Flags()}
		c := &cliContext{fl: fl, args: args, json: fl.Bool("json"), out: os.Stdout}
		err := f(c)
		var ue usageError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &ue):
			return cliFail(cmd, exitUsage, err, c.json)
		case errors.Is(err, errOutcomeUnknown):
			return cliFail(cmd, exitUnknown, err, c.json)
		}
		return cliFail(cmd, exitFailed, err, c.json)
	}
}

// cliFail reports err and ends the command with code. Without --json (asLog false) the error is
// one plain line on stderr; with --json it goes through Caddy's logger as it always has (a JSON
// line when stderr is not a terminal).
//
// caddycmd.Main exits with the code of an error made by caddycmd.WrapCommandFuncForCobra, and
// with 1 for any other error; the wrapper logs the error it is given, so it gets none when the
// error is printed here.
func cliFail(cmd *cobra.Command, code int, err error, asLog bool) error {
	if asLog {
		return caddycmd.WrapCommandFuncForCobra(func(caddycmd.Flags) (int, error) { return code, err })(cmd, nil)
	}
	fmt.Fprintln(cmd.ErrOrStderr(), "error: "+strings.Join(strings.Fields(err.Error()), " "))
	cmd.SilenceErrors = true
	if code == exitFailed {
		return err
	}
	return caddycmd.WrapCommandFuncForCobra(func(caddycmd.Flags) (int, error) { return code, nil })(cmd, nil)
}

// cliFlagError is the FlagErrorFunc of every textgen command: a flag that does not parse, or
// that does not exist, is a command-line mistake (exit 2, one plain line, also with --json).
func cliFlagError(cmd *cobra.Command, err error) error {
	return cliFail(cmd, exitUsage, err, false)
}

// cliNoArgs is the Args check of every textgen command: they take flags only, so an argument is
// a mistyped subcommand or a stray word (exit 2, one plain line).
func cliNoArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return cliFail(cmd, exitUsage, err, false)
	}
	return nil
}

func cliLeaf(use, short string, f cliFunc, flags func(*cobra.Command)) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: cliNoArgs, RunE: cliRun(f)}
	if flags != nil {
		flags(cmd)
	}
	return cmd
}

// cliLeafArg is cliLeaf for a command that may name what it acts on as one positional argument
// (caddy textgen code disable ID) instead of a flag.
func cliLeafArg(use, short string, f cliFunc, flags func(*cobra.Command)) *cobra.Command {
	cmd := cliLeaf(use, short, f, flags)
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if err := cobra.MaximumNArgs(1)(cmd, args); err != nil {
			return cliFail(cmd, exitUsage, err, false)
		}
		return nil
	}
	return cmd
}

func cliGroup(use, short string, children ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: cliNoArgs, RunE: groupHelp}
	cmd.AddCommand(children...)
	return cmd
}

// groupHelp makes a command group runnable, so that cobra rejects a mistyped subcommand
// ("unknown command", exit 2) instead of printing the help and exiting 0; the bare group prints
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
	pf.String("ledger", "", "Ledger: which ledger to use when the server has several open; for restore, the new directory; for migrate, the Badger directory to copy")
	pf.Bool("json", false, "Print one JSON object instead of a table")
	cmd.Args = cliNoArgs
	cmd.RunE = groupHelp
	// inherited by every subcommand
	cmd.SetFlagErrorFunc(cliFlagError)

	cmd.AddCommand(
		cliGroup("account", "Accounts: create, list, get (with credits and keys), disable, enable, invite",
			cliLeaf("create", "Creates an account", cmdAccountCreate, func(c *cobra.Command) {
				c.Flags().String("email", "", "Email address of the account holder (required, unique)")
				c.Flags().Int("test-credits", defaultTestCredits, "Free test credits the account starts with (test keys draw on them)")
			}),
			cliLeaf("list", "Lists accounts (all of them unless --limit is given)", cmdAccountList, func(c *cobra.Command) {
				c.Flags().Int("limit", 0, "Page size: list one page of at most this many accounts")
				c.Flags().String("cursor", "", "Continue after the page that returned this next_cursor")
			}),
			cliLeaf("get", "Shows an account with its credits and keys", cmdAccountGet, accountFlag),
			cliLeaf("disable", "Disables an account: its keys get 403 account_disabled until it is enabled", cmdAccountStatus("disable"), accountFlag),
			cliLeaf("enable", "Enables a disabled account", cmdAccountStatus("enable"), accountFlag),
			cliLeaf("invite", "E-mails (and prints) a link with which the account sets its password", cmdAccountInvite, accountFlag),
		),
		cliGroup("key", "API keys: create, list, revoke, limits, roll",
			cliLeaf("create", "Creates an API key; the full key is printed only this once", cmdKeyCreate, func(c *cobra.Command) {
				accountFlag(c)
				c.Flags().Bool("test", false, "Create a test key (tg_test_...): sample text, test credits, never the model")
				c.Flags().String("name", "", "A name for the key, to recognise it later")
				c.Flags().String("expires", "", "Expiry: an RFC 3339 time (2030-01-31T00:00:00Z) or a duration from now (720h, 90d); default never")
			}),
			cliLeaf("list", "Lists an account's keys (never the full keys)", cmdKeyList, accountFlag),
			cliLeaf("revoke", "Revokes a key; it stops working with the next request", cmdKeyRevoke, func(c *cobra.Command) {
				accountFlag(c)
				c.Flags().String("key-id", "", "Id of the key to revoke (required; see 'caddy textgen key list')")
			}),
			cliLeaf("limits", "Sets a key's budgets, allowed tools and addresses, name, note or expiry (flags not given are kept)", cmdKeyLimits, keyLimitsFlags),
			cliLeaf("roll", "Gives a key a new secret (same id, limits and budgets); the old one works for --grace", cmdKeyRoll, func(c *cobra.Command) {
				accountFlag(c)
				c.Flags().String("key-id", "", "Id of the key to roll (required)")
				c.Flags().String("grace", "0", "How long the previous secret keeps working: 0 to 7d (24h, 2d)")
			}),
		),
		cliGroup("member", "Organisations: an account's members (each a login of its own) share its credits: list, organise, add, remove, role, cap, usage",
			cliLeaf("list", "Lists an organisation's members and invitations, with their role, cap and use this month", cmdMemberList, accountFlag),
			cliLeaf("organise", "Makes an account an organisation: it becomes its first owner; its credits, keys and login stay", cmdMemberOrganise, accountFlag),
			cliLeaf("add", "Adds an account (the member's own login) to an organisation", cmdMemberAdd, func(c *cobra.Command) {
				memberFlag(c)
				c.Flags().String("role", "member", "owner (billing, members, everything), admin (members and keys) or member (their own keys)")
			}),
			cliLeaf("remove", "Removes a member; the member's keys of the organisation stop working with the next request", cmdMemberRemove, memberFlag),
			cliLeaf("role", "Sets a member's role (the last owner keeps theirs)", cmdMemberRole, func(c *cobra.Command) {
				memberFlag(c)
				c.Flags().String("role", "", "owner, admin or member (required)")
			}),
			cliLeaf("cap", "Sets the most live credits a member's keys may take in one UTC month", cmdMemberCap, func(c *cobra.Command) {
				memberFlag(c)
				c.Flags().Int64("monthly-cap", 0, "Credits per UTC calendar month (required; 0: no cap)")
			}),
			cliLeaf("usage", "Shows the credits each member's keys took, by UTC month", cmdMemberUsage, func(c *cobra.Command) {
				accountFlag(c)
				c.Flags().String("from", "", "First month, YYYY-MM (default: this month)")
				c.Flags().String("to", "", "Last month, YYYY-MM, included (default: this month)")
			}),
		),
		cliGroup("credits", "Credits: grant, adjust",
			cliLeaf("grant", "Grants credits; idempotent on --reference", cmdCreditsGrant, func(c *cobra.Command) {
				accountFlag(c)
				c.Flags().Int64("credits", 0, "Number of credits to grant (required, > 0)")
				c.Flags().String("reference", "", "Unique reference (e.g. an invoice number): the same reference never credits twice")
				c.Flags().Bool("test", false, "Grant test credits (used by test keys) instead of live credits")
				c.Flags().String("expires", "", "When what is left of the credits expires: a time from now (90d, 36h) or an RFC 3339 time (default: never; live credits only)")
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
			c.Flags().Bool("by-key", false, "Per API key and tool of --account (required with it) instead of per day")
		}),
		cliGroup("ledger", "The ledger: verify, migrate",
			cliLeaf("verify", "Checks that every balance equals the sum of its entries; exits 1 when not", cmdVerify, quietFlag),
			cliLeaf("migrate", "Copies a Badger ledger (--ledger DIR) into an empty PostgreSQL database (--to URL) (offline: stop the server first)", cmdMigrate, func(c *cobra.Command) {
				c.Flags().String("to", "", "URL of the empty PostgreSQL database (postgres://...; required)")
				quietFlag(c)
			}),
		),
		cliLeaf("backup", "Downloads an online backup of the ledger from the running server", cmdBackup, func(c *cobra.Command) {
			c.Flags().StringP("output", "o", "", "File to write the backup to (required; it appears only once complete; an existing file is replaced only with --force)")
			c.Flags().Bool("force", false, "Replace the --output file if it exists")
			quietFlag(c)
		}),
		cliLeaf("restore", "Loads a backup into a new, empty ledger directory (offline: the server must not use it)", cmdRestore, func(c *cobra.Command) {
			c.Flags().StringP("input", "i", "", "Backup file written by 'caddy textgen backup' (required)")
			quietFlag(c)
		}),
		cliGroup("payments", "Payments that came in and credited nothing (another amount, an unknown package or account), refunds and disputes: list, resolve, refund",
			cliLeaf("list", "Lists paid Checkout Sessions that credited nothing, newest first (open ones unless --all)", cmdPaymentsList, func(c *cobra.Command) {
				c.Flags().Bool("all", false, "Also list the resolved ones")
				c.Flags().Int("limit", 50, "Number of payments (at most 1000)")
			}),
			cliLeaf("resolve", "Marks an unmatched payment resolved, with what was done (credited by hand, refunded)", cmdPaymentsResolve, func(c *cobra.Command) {
				c.Flags().String("reference", "", "The payment's reference: its Checkout Session id (required; see 'caddy textgen payments list')")
				c.Flags().String("note", "", "What was done, e.g. \"credited acct_... by hand\" or \"refunded\" (required; stays in the ledger)")
			}),
			cliLeaf("refund", "Refunds a purchase through Stripe's API; the ledger takes the refunded share of its credits off once (rounded up), as for a refund made in Stripe", cmdPaymentsRefund, func(c *cobra.Command) {
				c.Flags().String("reference", "", "The purchase's reference: its Checkout Session id (required; see 'caddy textgen history')")
				c.Flags().Int64("amount", 0, "Cents to refund (default: all that is left)")
				c.Flags().String("reason", "", "Stripe's reason: duplicate, fraudulent or requested_by_customer")
			}),
		),
		cliGroup("code", "Redemption codes worth credits: create (the code is printed once), list, disable, redemptions",
			cliLeaf("create", "Creates a code worth live credits for one or more accounts, and prints it once", cmdCodeCreate, func(c *cobra.Command) {
				c.Flags().Int64("credits", 0, "Live credits the code gives each account that redeems it (required, 1 to 1000000)")
				c.Flags().Int64("uses", 1, "How many accounts may redeem it (each once)")
				c.Flags().String("expires", "", "When it stops working: a time from now (90d, 36h) or an RFC 3339 time (default: never)")
				c.Flags().String("note", "", "What the code is for (a campaign, a customer); shown in lists and the audit log")
			}),
			cliLeaf("list", "Lists codes, newest first, with their uses and state (never the codes themselves)", cmdCodeList, func(c *cobra.Command) {
				c.Flags().Int("limit", 50, "Number of codes (at most 1000)")
			}),
			cliLeafArg("disable ID", "Stops a code at once; the credits it gave stay", cmdCodeDisable, func(c *cobra.Command) {
				c.Flags().String("id", "", "The code's id, code_... (or give it as the argument; see 'caddy textgen code list')")
				c.Flags().String("note", "", "Why, for the audit log")
			}),
			cliLeafArg("redemptions ID", "Shows who redeemed a code, and when", cmdCodeRedemptions, func(c *cobra.Command) {
				c.Flags().String("id", "", "The code's id, code_... (or give it as the argument)")
				c.Flags().Int("limit", 1000, "Number of redemptions (at most 1000)")
			}),
		),
		cliGroup("mail", "E-mail outbox: list, drop",
			cliLeaf("list", "Lists the e-mail waiting to go out, oldest first, with its attempts and last error", cmdMailList, func(c *cobra.Command) {
				c.Flags().Int("limit", 50, "Number of messages (at most 1000)")
			}),
			cliLeaf("drop", "Gives up on a queued e-mail (an address that can never receive it): no sender tries it again", cmdMailDrop, func(c *cobra.Command) {
				c.Flags().String("id", "", "Id of the message (required; see 'caddy textgen mail list')")
			}),
		),
		cliGroup("receipts", "Signed receipts: the signing keys, keys (list) and rotate-key",
			cliLeaf("keys", "Lists the receipt signing keys (public halves), the current one last", cmdReceiptKeys, nil),
			cliLeaf("rotate-key", "Makes a new current receipt signing key; the old ones stay listed so that their receipts still verify", cmdReceiptRotate, nil),
		),
		cliGroup("operator", "Operators of the web console (textgen_console): create, list, remove",
			cliLeaf("create", "Creates an operator and prints, once, its TOTP secret, otpauth URL and recovery codes (and its password when generated)", cmdOperatorCreate, func(c *cobra.Command) {
				c.Flags().String("email", "", "The operator's e-mail address, which it logs in with (required, unique)")
				c.Flags().String("role", "", "viewer (reads), support (also notes, grants and adjustments within the console's limit) or owner (everything: also disable/enable, refunds) (required)")
				c.Flags().Bool("password-stdin", false, "Read the password from standard input (default: a generated one, printed once)")
				c.Flags().String("note", "", "Why, for the audit log")
			}),
			cliLeaf("list", "Lists the operators with their role", cmdOperatorList, nil),
			cliLeaf("remove", "Removes an operator and ends its sessions (the audit log keeps what it did)", cmdOperatorRemove, func(c *cobra.Command) {
				c.Flags().String("id", "", "The operator's id (required; see 'caddy textgen operator list')")
				c.Flags().String("note", "", "Why, for the audit log")
			}),
		),
		cliGroup("stripe", "Stripe: send My Account's webhook a signed test event",
			cliLeaf("webhook", "Sends the webhook a signed checkout.session.completed of a paid session (a local purchase with stripe-mock; it credits the account)", cmdStripeWebhook, func(c *cobra.Command) {
				c.Flags().String("account", "", "Account id the session was paid for (required; see 'caddy textgen account list')")
				c.Flags().String("url", defaultWebhookURL, "Address of My Account's webhook (its prefix + /stripe/webhook)")
				c.Flags().String("secret", "", "The webhook signing secret (stripe_webhook_secret); default $"+webhookSecretEnv)
				c.Flags().String("session", "", "Checkout Session id (default: a new cs_test_local_...; the same id never credits twice)")
				c.Flags().String("package", defaultPackage, "Package id, as the session's metadata names it")
				c.Flags().Int64("credits", defaultPackage10Credits, "Credits of the package")
				c.Flags().Int64("amount-cents", defaultPackageCents, "Amount paid in euro cents (the webhook credits only the package's price)")
				c.Flags().String("latest-from", "", "Caddy's log file: pay the latest Checkout Session it records ('checkout session created': its account, session and package), instead of --account, --session, --package, --credits and --amount-cents")
			}),
		),
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

// listLimit is the --limit of a list without pages: 1 to 1000, the admin API's range.
func listLimit(fl caddycmd.Flags) (int, error) {
	limit, err := fl.GetInt("limit")
	if err != nil {
		return 0, usagef("--limit: %v", err)
	}
	if limit < 1 || limit > 1000 {
		return 0, usagef("--limit must be from 1 to 1000")
	}
	return limit, nil
}

func modeFlag(fl caddycmd.Flags) ledger.Mode {
	if fl.Bool("test") {
		return ledger.Test
	}
	return ledger.Live
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
