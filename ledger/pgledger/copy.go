package pgledger

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// CopyLedger copies the whole ledger of from (an engine that implements Exporter: Badger) into
// to, whose database must hold no account yet: accounts with their balances, key digests (so the
// keys handed out before keep working), entries with their numbers and times, holds open or
// resolved, grant references (they are the entries'), password hashes, live sessions,
// Idempotency-Key records, unmatched payments, the console's operators and audit log, queued e-mail (sealed as it was: the instances on
// to need the same mail key to send it) and live single-use tokens (the links in mail sent
// before keep working, once). Afterwards balances, key lookups, log-ins, histories, links and
// Verify give on to what they gave on from. It is one transaction: on any error nothing is copied.
// It runs until ctx's deadline, or for pgLongTimeout when ctx has none.
//
// Stop the servers that use from first: changes made while it runs may be missed. Holds still
// open are copied open and expire by their TTL on the new store.
//
// Expected errors: ErrInvalidArgument (from cannot export, or to is not empty), ErrClosed,
// ErrUnavailable.
func CopyLedger(ctx context.Context, from ledger.Store, to *Postgres, opts CopyOptions) error {
	ex, ok := from.(ledger.Exporter)
	if !ok {
		return fmt.Errorf("copying ledger: a %T store cannot export its ledger: %w", from, ledger.ErrInvalidArgument)
	}
	if err := to.life.Begin(); err != nil {
		return err
	}
	defer to.life.End()
	ctx, cancel := pgLongContext(ctx)
	defer cancel()
	err := pgx.BeginFunc(ctx, to.pool, func(tx pgx.Tx) error {
		if err := pgLongStatements(ctx, tx); err != nil {
			return err
		}
		// Other instances may not write while the copy runs, nor copy at the same time.
		if _, err := tx.Exec(ctx, `LOCK TABLE accounts IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		var used bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM accounts)`).Scan(&used); err != nil {
			return err
		}
		if used {
			return fmt.Errorf("the target database has accounts already; copy into an empty one: %w", ledger.ErrInvalidArgument)
		}
		imp := &pgImport{ctx: ctx, tx: tx, rows: map[string][][]any{}}
		var sink ledger.ExportSink = imp
		if opts.Progress != nil {
			sink = pgImportProgress{imp, opts.Progress}
		}
		if err := ex.Export(ctx, sink); err != nil {
			return err
		}
		if err := imp.flush(); err != nil {
			return err
		}
		if err := imp.countReversed(); err != nil {
			return err
		}
		if err := imp.countDisputed(); err != nil {
			return err
		}
		if err := imp.markLots(); err != nil {
			return err
		}
		return imp.markOrganisations()
	})
	return pgErr(ctx, "copying ledger", err)
}

// CopyOptions are CopyLedger's options.
type CopyOptions struct {
	// Progress, when not nil, is told the records copied of the records there are, as far as
	// from can count them (ledger.ExportProgressSink): Badger counts them first, and calls it
	// every thousand records or so. The copy then still counts reversed credits, checks and
	// commits (a few statements over the copied tables), after the last call.
	Progress ledger.ProgressFunc
}

// pgImportProgress is the sink of a copy whose progress is reported.
type pgImportProgress struct {
	*pgImport
	progress ledger.ProgressFunc
}

func (p pgImportProgress) ExportProgress(done, total int64) { p.progress(done, total) }

// pgImport is the ExportSink of CopyLedger: it buffers rows per table and writes them with COPY.
type pgImport struct {
	ctx  context.Context
	tx   pgx.Tx
	rows map[string][][]any
	n    int
}

// pgImportTables are the tables CopyLedger fills, with their columns, in the order their rows
// are written: accounts first, which the other rows reference.
var pgImportTables = []struct {
	name string
	cols []string
}{
	{"accounts", []string{"id", "email", "status", "created", "balance", "held", "test_balance", "test_held", "next_seq",
		"unverified", "low_balance_alert", "low_balance_notified", "reversed"}},
	{"api_keys", []string{"id", "account_id", "digest", "mode", "name", "prefix", "last4", "created", "last_used", "expires", "revoked",
		"note", "budget_total", "budget_day", "budget_month", "allowed_tools", "allowed_cidrs", "rolled", "prev_digest", "prev_last4", "prev_until", "member_id"}},
	{"api_key_usage", []string{"key_id", "total", "day", "day_start", "month", "month_start"}},
	{"lots", []string{"account_id", "seq", "amount", "remaining", "held", "expires"}},
	{"holds", []string{"account_id", "request_id", "mode", "state", "key_id", "tool", "created", "expires", "hold_seq", "resolved", "resolve_seq", "reason", "credits"}},
	{"hold_lots", []string{"account_id", "request_id", "seq", "credits"}},
	{"entries", []string{"account_id", "seq", "kind", "mode", "amount", "balance_after", "available_after", "request_id", "key_id", "tool", "reference", "reason", "amount_cents", "currency", "at", "credits"}},
	{"credentials", []string{"account_id", "hash", "updated"}},
	{"sessions", []string{"digest", "account_id", "created", "expires", "csrf_token"}},
	{"idempotency", []string{"account_id", "idem_key", "request_id", "fingerprint", "status", "created", "hold_ttl"}},
	{"unmatched_payments", []string{"reference", "event", "account_id", "package", "credits", "amount_cents", "currency",
		"problem", "detail", "created", "resolved", "resolution"}},
	{"payments", strings.Split(pgPayCols, ", ")},
	{"reversals", strings.Split(pgReversalCols, ", ")},
	{"mail_outbox", []string{"id", "account_id", "kind", "sealed", "created", "attempts", "next_attempt", "lease_until", "claim", "last_error"}},
	{"account_tokens", []string{"digest", "account_id", "purpose", "expires"}},
	{"receipt_keys", strings.Split(pgReceiptKeyCols, ", ")},
	{"receipt_digests", []string{"account_id", "request_id", "sha256"}},
	{"memberships", []string{"org_id", "member_id", "role", "monthly_cap", "pending", "created"}},
	{"member_usage", []string{"org_id", "member_id", "month", "used"}},
	{"operators", []string{"id", "email", "role", "created", "hash", "totp_sealed", "totp_last_step", "recovery"}},
	{"operator_audit", strings.Split(pgAuditCols, ", ")},
	{"redemption_codes", []string{"id", "digest", "last4", "credits", "max_uses", "uses", "expires", "note", "created", "disabled"}},
	{"code_redemptions", []string{"code_id", "account_id", "credits", "seq", "at"}},
	{"topup_rules", strings.Split(pgRuleCols, ", ")},
	{"topups", strings.Split(pgTopUpCols, ", ")},
	{"alert_endpoints", []string{"id", "account_id", "url", "kinds", "sealed_secret", "created"}},
	{"alert_deliveries", strings.Split(strings.ReplaceAll(pgAlertCols, "d.", ""), ", ")},
}

// pgImportBuffer is how many rows are buffered before they are written.
const pgImportBuffer = 5000

func (p *pgImport) add(table string, row ...any) error {
	p.rows[table] = append(p.rows[table], row)
	if p.n++; p.n >= pgImportBuffer {
		return p.flush()
	}
	return nil
}

// flush writes the buffered rows, table by table in pgImportTables' order.
func (p *pgImport) flush() error {
	for _, t := range pgImportTables {
		if rows := p.rows[t.name]; len(rows) > 0 {
			if _, err := p.tx.CopyFrom(p.ctx, pgx.Identifier{t.name}, t.cols, pgx.CopyFromRows(rows)); err != nil {
				return fmt.Errorf("writing %s: %w", t.name, err)
			}
			p.rows[t.name] = rows[:0]
		}
	}
	p.n = 0
	return nil
}

// Account stores an account. Its reversed credits (what refunds and disputes took, the floor of
// a debt) are not an exported figure: they start at what the row's check needs and are counted
// from the copied entries at the end (countReversed).
//
// Its lots (the credits that expire) are copied as they are; the account is marked as having
// lots only at the end (markLots), so that the copied open holds do not take from them again
// (migrations/00018's trigger) but keep the takes copied with them.
func (p *pgImport) Account(a ledger.ExportAccount) error {
	err := p.add("accounts", a.ID, a.Email, string(a.Status), a.Created.UnixNano(), a.Balance, a.Held,
		a.TestBalance, a.TestHeld, int64(a.NextSeq), a.Unverified, a.LowBalanceAlert, a.LowBalanceNotified,
		max(a.Held-a.Balance, 0))
	for _, l := range a.Lots {
		if err != nil {
			break
		}
		err = p.add("lots", a.ID, int64(l.Seq), l.Amount, l.Remaining, l.Held, l.Expires.UnixNano())
	}
	return err
}

// markLots marks the accounts with lots, once their holds are copied.
func (p *pgImport) markLots() error {
	if _, err := p.tx.Exec(p.ctx, `UPDATE accounts SET has_lots = true WHERE id IN (SELECT account_id FROM lots)`); err != nil {
		return fmt.Errorf("marking the accounts with credits that expire: %w", err)
	}
	return nil
}

// countReversed sets every account's reversed credits from its refund and dispute entries, as
// Reverse keeps them.
func (p *pgImport) countReversed() error {
	_, err := p.tx.Exec(p.ctx, `UPDATE accounts a SET reversed = r.credits
		FROM (SELECT account_id, -sum(amount) AS credits FROM entries
			WHERE kind IN ('refund', 'dispute') AND mode = 'live' GROUP BY account_id) r
		WHERE a.id = r.account_id`)
	if err != nil {
		return fmt.Errorf("counting reversed credits: %w", err)
	}
	return nil
}

// countDisputed sets the disputed cents of the payments that a ledger of an earlier version
// copied without them, from their disputes open or lost (as migration 00013 does).
func (p *pgImport) countDisputed() error {
	_, err := p.tx.Exec(p.ctx, `UPDATE payments p SET disputed_cents = d.cents
		FROM (SELECT payment, sum(amount_cents) AS cents FROM reversals
			WHERE kind = 'dispute' AND status IN ('open', 'lost') GROUP BY payment) d
		WHERE p.id = d.payment AND p.disputed_cents = 0`)
	if err != nil {
		return fmt.Errorf("counting disputed cents: %w", err)
	}
	return nil
}

// Payment stores a payment that refunds and disputes name.
func (p *pgImport) Payment(pay ledger.Payment) error {
	return p.add("payments", payArgs(pay)...)
}

// Reversal stores a refund or dispute as applied.
func (p *pgImport) Reversal(r ledger.Reversal) error {
	return p.add("reversals", r.ID, string(r.Kind), r.Payment, r.AccountID, r.Reference, r.AmountCents, r.Currency,
		r.Credits, r.Status, r.Reason, r.Event, r.Created.UnixNano(), r.Updated.UnixNano())
}

// Key stores a key with its limits, its previous secret (a roll's, while it is kept) and, if it
// has spent anything, its usage.
func (p *pgImport) Key(k ledger.ExportKey) error {
	var prev any
	if k.PrevDigest != ([32]byte{}) {
		prev = k.PrevDigest[:]
	}
	err := p.add("api_keys", k.ID, k.AccountID, k.Digest[:], string(k.Mode), k.Name, k.Prefix, k.Last4,
		k.Created.UnixNano(), pgNanos(k.LastUsed), pgNanos(k.Expires), pgNanos(k.Revoked),
		k.Note, k.BudgetTotal, k.BudgetDay, k.BudgetMonth, pgTextArray(k.AllowedTools), pgTextArray(k.AllowedCIDRs),
		pgNanos(k.Rolled), prev, k.PreviousLast4, pgNanos(k.GraceUntil), k.MemberID)
	if err != nil || k.Usage == (ledger.KeyUsage{}) {
		return err
	}
	u := k.Usage
	return p.add("api_key_usage", k.ID, u.Total, u.Day, pgNanosOrZero(u.DayStart), u.Month, pgNanosOrZero(u.MonthStart))
}

func pgNanosOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (p *pgImport) Hold(h ledger.ExportHold) error {
	var resolveSeq any
	if h.ResolveSeq != 0 {
		resolveSeq = int64(h.ResolveSeq)
	}
	err := p.add("holds", h.AccountID, h.RequestID, string(h.Mode), string(h.State), h.KeyID, h.Tool,
		h.Created.UnixNano(), h.Expires.UnixNano(), int64(h.HoldSeq), pgNanos(h.Resolved), resolveSeq, h.Reason,
		ledger.HeldCredits(h.Credits))
	if h.State != ledger.HoldOpen {
		return err // what a resolved hold took is spent or given back
	}
	for _, t := range h.Lots {
		if err != nil {
			break
		}
		err = p.add("hold_lots", h.AccountID, h.RequestID, int64(t.Seq), t.Credits)
	}
	return err
}

func (p *pgImport) Entry(e ledger.Entry) error {
	return p.add("entries", e.AccountID, int64(e.Seq), string(e.Kind), string(e.Mode), e.Amount, e.BalanceAfter,
		e.AvailableAfter, e.RequestID, e.KeyID, e.Tool, e.Reference, e.Reason, e.AmountCents, e.Currency, e.Time.UnixNano(), e.Credits)
}

func (p *pgImport) Credential(c ledger.ExportCredential) error {
	return p.add("credentials", c.AccountID, c.Hash, c.Updated.UnixNano())
}

func (p *pgImport) Session(s ledger.ExportSession) error {
	return p.add("sessions", s.Digest[:], s.AccountID, s.Created.UnixNano(), s.Expires.UnixNano(), s.CSRFToken)
}

func (p *pgImport) Idempotency(r ledger.IdempotencyRecord) error {
	return p.add("idempotency", r.AccountID, r.Key, r.RequestID, r.Fingerprint, r.Status, r.Created.UnixNano(), int64(r.HoldTTL))
}

// UnmatchedPayment stores a payment that credited nothing, open or resolved.
func (p *pgImport) UnmatchedPayment(u ledger.UnmatchedPayment) error {
	return p.add("unmatched_payments", u.Reference, u.Event, u.AccountID, u.Package, u.Credits, u.AmountCents,
		u.Currency, u.Problem, u.Detail, u.Created.UnixNano(), pgNanos(u.Resolved), u.Resolution)
}

// Mail stores a queued message as it was, lease and claim included: a message that a sender
// held when the server stopped is due again when its lease runs out, as on Badger.
func (p *pgImport) Mail(m ledger.MailMessage) error {
	var leaseUntil int64
	if !m.LeaseUntil.IsZero() {
		leaseUntil = m.LeaseUntil.UnixNano()
	}
	return p.add("mail_outbox", m.ID, m.AccountID, m.Kind, m.Sealed, m.Created.UnixNano(), int32(m.Attempts),
		m.NextAttempt.UnixNano(), leaseUntil, m.Claim, m.LastError)
}

func (p *pgImport) Token(t ledger.ExportToken) error {
	return p.add("account_tokens", t.Digest[:], t.AccountID, string(t.Purpose), t.Expires.UnixNano())
}

// Operator stores a console operator with what it logs in with.
func (p *pgImport) Operator(o ledger.ExportOperator) error {
	rec := make([][]byte, len(o.Recovery))
	for i := range o.Recovery {
		rec[i] = o.Recovery[i][:]
	}
	return p.add("operators", o.ID, o.Email, string(o.Role), o.Created.UnixNano(), o.Hash, o.TOTPSealed, o.LastStep, rec)
}

// Audit stores one record of the audit log.
func (p *pgImport) Audit(r ledger.AuditRecord) error {
	return p.add("operator_audit", r.ID, r.Time.UnixNano(), r.OperatorID, r.OperatorEmail, r.Action, r.AccountID, r.Detail, r.Note)
}

// Code stores a redemption code with its digest and uses.
func (p *pgImport) Code(c ledger.ExportCode) error {
	return p.add("redemption_codes", c.ID, c.Digest[:], c.Last4, c.Credits, c.MaxUses, c.Uses, pgNanos(c.Expires), c.Note,
		c.Created.UnixNano(), pgNanos(c.Disabled))
}

// CodeRedemption stores one account's redemption of a code.
func (p *pgImport) CodeRedemption(r ledger.CodeRedemption) error {
	return p.add("code_redemptions", r.CodeID, r.AccountID, r.Credits, int64(r.Seq), r.Time.UnixNano())
}

// Interface guards
var (
	_ ledger.ExportSink         = (*pgImport)(nil)
	_ ledger.ExportProgressSink = pgImportProgress{}
)

func (p *pgImport) TopUpRule(r ledger.TopUpRule) error {
	return p.add("topup_rules", r.AccountID, r.Card.CustomerID, r.Card.PaymentMethodID, r.Card.Brand, r.Card.Last4,
		r.Threshold, r.Package, r.MonthlyCap, r.Enabled, r.Paused, r.PausedWhy, pgNanosOrZero(r.Updated))
}

func (p *pgImport) TopUp(t ledger.TopUp) error {
	return p.add("topups", t.ID, t.AccountID, t.Month, t.Status, t.Package, t.PaymentIntent, t.Detail,
		pgNanosOrZero(t.Created), pgNanosOrZero(t.Updated))
}

func (p *pgImport) AlertEndpoint(e ledger.AlertEndpoint) error {
	kinds := e.Kinds
	if kinds == nil {
		kinds = []string{}
	}
	return p.add("alert_endpoints", e.ID, e.AccountID, e.URL, kinds, e.SealedSecret, pgNanosOrZero(e.Created))
}

func (p *pgImport) AlertDelivery(d ledger.AlertDelivery) error {
	return p.add("alert_deliveries", d.ID, d.AccountID, d.EndpointID, d.EventID, d.Kind, d.Payload, pgNanosOrZero(d.Created),
		d.State, d.Attempts, pgNanosOrZero(d.NextAttempt), pgNanosOrZero(d.LeaseUntil), d.Claim, d.LastStatus, d.LastError,
		pgNanosOrZero(d.Finished))
}

func (p *pgImport) Membership(m ledger.Membership) error {
	return p.add("memberships", m.OrgID, m.MemberID, string(m.Role), m.MonthlyCap, m.Pending, m.Created.UnixNano())
}

// markOrganisations flags the accounts that have members (accounts.organisation), which the
// hold functions read instead of looking the memberships up.
func (p *pgImport) markOrganisations() error {
	_, err := p.tx.Exec(p.ctx, `UPDATE accounts SET organisation = true WHERE id IN (SELECT org_id FROM memberships)`)
	if err != nil {
		return fmt.Errorf("marking organisations: %w", err)
	}
	return nil
}

func (p *pgImport) MemberUsage(u ledger.ExportMemberUsage) error {
	return p.add("member_usage", u.OrgID, u.MemberID, u.Month, u.Credits)
}
