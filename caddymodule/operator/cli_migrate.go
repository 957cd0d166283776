package operator

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
	"github.com/caddy-textgen/textgen/ledger/pgledger"
)

// migrateResult is what `caddy textgen ledger migrate` prints with --json.
type migrateResult struct {
	Migrated bool   `json:"migrated"`
	From     string `json:"from"`
	To       string `json:"to"` // without its password
	Accounts int    `json:"accounts"`
	Entries  int    `json:"entries"`
	// FromOK and ToOK are the verify results of both ledgers after the copy.
	FromOK bool `json:"from_ok"`
	ToOK   bool `json:"to_ok"`
}

// migrateTimeout bounds the whole copy and its verification: a ledger of 50 million entries
// takes the better part of an hour on a small machine. The copy is one transaction, so stopping
// the command (Ctrl-C) copies nothing.
const migrateTimeout = 12 * time.Hour

// cmdMigrate copies a Badger ledger into an empty PostgreSQL database (pgledger.CopyLedger). Like
// restore it is offline: it opens the Badger directory itself, so the server that uses it must
// be stopped (the directory lock says so otherwise); the copy is then verified on both sides.
func cmdMigrate(c *cliContext) error {
	dir, err := requireString(c.fl, "ledger")
	if err != nil {
		return err
	}
	to, err := requireString(c.fl, "to")
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("ledger directory %s: %w", dir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), migrateTimeout)
	defer cancel()
	// Four steps: the open (Badger loads every account and key), the copy (its records, once
	// counted), and the verification of each side (their accounts).
	p := c.progress()
	defer p.Close()
	p.Start("opening the Badger ledger", "")
	from, err := badgerledger.Open(abs, badgerledger.Options{SweepInterval: -1, GCInterval: -1, LastUsedFlushInterval: -1})
	if err != nil {
		return fmt.Errorf("%w (stop the server that uses it first)", err)
	}
	defer from.Close()
	p.Start("copying", "records")
	pg, err := pgledger.OpenPostgres(ctx, to, pgledger.PostgresOptions{SweepInterval: -1, LastUsedFlushInterval: -1})
	if err != nil {
		return err
	}
	defer pg.Close()
	if err := pgledger.CopyLedger(ctx, from, pg, pgledger.CopyOptions{Progress: p.Set}); err != nil {
		return err
	}
	res := migrateResult{Migrated: true, From: abs, To: redactURL(to)}
	for _, side := range []struct {
		label string
		s     operatorLedger
		ok    *bool
	}{{"verifying the Badger ledger", from, &res.FromOK}, {"verifying the PostgreSQL ledger", pg, &res.ToOK}} {
		p.Start(side.label, "accounts")
		rep, err := ledger.VerifyWithProgress(ctx, side.s, p.Set)
		if err != nil {
			return fmt.Errorf("verifying after the copy: %w", err)
		}
		*side.ok = rep.OK
		res.Accounts, res.Entries = rep.Accounts, rep.Entries
	}
	p.Done()
	if !res.FromOK || !res.ToOK {
		return fmt.Errorf("the copy does not verify clean (from: %v, to: %v); run 'caddy textgen ledger verify' on each", res.FromOK, res.ToOK)
	}
	return c.printValue(res, func(w io.Writer) {
		fmt.Fprintf(w, "Copied %d accounts and %d entries from %s into %s; both verify clean.\n"+
			"Point the textgen handlers of every instance at the database (ledger %s), start them, and run 'caddy textgen ledger verify'.\n",
			res.Accounts, res.Entries, res.From, res.To, res.To)
	})
}

// redactURL is a database URL without its password, for output.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unreadable URL)"
	}
	return u.Redacted()
}
