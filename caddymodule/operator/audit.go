package operator

import (
	"context"

	"github.com/caddy-textgen/textgen/ledger"
)

// What the admin API (and so the CLI) does to money and access goes into the ledger's audit
// log, as the console's actions do, under the name adminAuditor: the record first, then the
// action; an action that fails gets a second record that says why.

// noNote is the note of an admin API call that gave no reason.
const noNote = "(no reason given)"

// audited writes the record of action on account (detail: what exactly; note: why), runs do,
// and records its failure.
func audited(ctx context.Context, store ledger.Operators, action, account, detail, note string, do func() error) error {
	rec := adminAuditor
	rec.Action, rec.AccountID, rec.Detail, rec.Note = action, account, detail, note
	if rec.Note == "" {
		rec.Note = noNote
	}
	if _, err := store.AppendAudit(ctx, rec); err != nil {
		return ledgerError(err, "writing the audit log (nothing was changed)")
	}
	err := do()
	if err != nil {
		failed := rec
		failed.Action, failed.Detail = action+".failed", truncateDetail(err.Error())
		_, _ = store.AppendAudit(ctx, failed)
	}
	return err
}

func truncateDetail(s string) string {
	if len(s) > 1000 {
		return s[:1000]
	}
	return s
}
