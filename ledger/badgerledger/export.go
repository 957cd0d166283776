package badgerledger

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// Export hands sink every record of the Badger ledger (ledger/export.go), from one read-only
// transaction taken after every acknowledged change is on disk and the keys' last-use times are
// written. A sink that is a ledger.ExportProgressSink is told how far it has come: the keys of
// the records are counted first, in the same transaction (a read of the keys, without their
// values).
func (s *Badger) Export(ctx context.Context, sink ledger.ExportSink) error {
	if err := s.flushLastUsed(true); err != nil {
		return err
	}
	if err := s.begin(); err != nil {
		return err
	}
	defer s.life.End()
	if err := s.c.barrier(); err != nil {
		return err
	}
	t := s.now()
	return s.db.View(func(txn *badger.Txn) error {
		held := map[string]map[ledger.Mode]int64{} // credits of the open holds per account and mode
		err := iterate(txn, []byte{prefixOpenHold}, func(k, _ []byte) error {
			acct, rid := string(k[1:1+ledger.AccountIDLen]), string(k[1+ledger.AccountIDLen:])
			rec, err := getHold(txn, acct, rid)
			if err != nil {
				return fmt.Errorf("open hold %q of %q: %w", rid, acct, err)
			}
			if held[acct] == nil {
				held[acct] = map[ledger.Mode]int64{}
			}
			held[acct][rec.Mode] += ledger.HeldCredits(rec.Credits)
			return nil
		})
		if err != nil {
			return err
		}
		// The credits that expire (expiry.go) are keyed by account first, as the accounts are:
		// one walk beside the accounts gives each its lots, one account's at a time.
		lots := &lotWalk{it: txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixLot}, PrefetchValues: true, PrefetchSize: 64})}
		defer lots.it.Close()
		lots.it.Rewind()
		steps := []struct {
			prefix byte
			each   func(k, v []byte) error
		}{
			{prefixAccount, func(k, v []byte) error {
				var a ledger.Account
				if err := json.Unmarshal(v, &a); err != nil {
					return fmt.Errorf("account %q: %w", k[1:], err)
				}
				bv, ok, err := getValue(txn, balanceKey(a.ID))
				if err != nil || !ok {
					return fmt.Errorf("balance of %q: missing (%v)", a.ID, err)
				}
				var b balanceRecord
				if err := json.Unmarshal(bv, &b); err != nil {
					return fmt.Errorf("balance of %q: %w", a.ID, err)
				}
				ls, err := lots.of(a.ID)
				if err != nil {
					return err
				}
				return sink.Account(ledger.ExportAccount{Account: a, Balance: b.Balance, Held: held[a.ID][ledger.Live],
					TestBalance: b.TestBalance, TestHeld: held[a.ID][ledger.Test], NextSeq: b.NextSeq, Lots: sortedLots(ls)})
			}},
			{prefixKey, func(k, v []byte) error {
				var rec keyRecord
				if err := json.Unmarshal(v, &rec); err != nil {
					return fmt.Errorf("key %q: %w", k[1:], err)
				}
				d, err := hex.DecodeString(rec.Digest)
				if err != nil || len(d) != 32 {
					return fmt.Errorf("key %q: malformed (%v)", k[1:], err)
				}
				ek := ledger.ExportKey{Key: rec.Key, Digest: [32]byte(d)}
				if rec.PrevDigest != "" {
					p, err := hex.DecodeString(rec.PrevDigest)
					if err != nil || len(p) != 32 {
						return fmt.Errorf("key %q: malformed previous digest (%v)", k[1:], err)
					}
					ek.PrevDigest = [32]byte(p)
				}
				return sink.Key(ek)
			}},
			{prefixHold, func(k, v []byte) error {
				var h holdRecord
				if err := json.Unmarshal(v, &h); err != nil {
					return fmt.Errorf("hold %q: %w", k[1:], err)
				}
				return sink.Hold(ledger.ExportHold{AccountID: h.AccountID, RequestID: h.RequestID, Mode: h.Mode, State: h.State,
					KeyID: h.KeyID, Tool: h.Tool, Created: h.Created, Expires: h.Expires, HoldSeq: h.HoldSeq,
					Resolved: h.Resolved, ResolveSeq: h.ResolveSeq, Reason: h.Reason, Credits: ledger.HeldCredits(h.Credits),
					Lots: openTakes(h)})
			}},
			{prefixEntry, func(k, v []byte) error {
				var e ledger.Entry
				if err := json.Unmarshal(v, &e); err != nil {
					return fmt.Errorf("entry %x: %w", k, err)
				}
				return sink.Entry(e)
			}},
			{prefixCredential, func(k, v []byte) error {
				var c credentialRecord
				if err := json.Unmarshal(v, &c); err != nil {
					return fmt.Errorf("credential of %q: %w", k[1:], err)
				}
				return sink.Credential(ledger.ExportCredential{AccountID: string(k[1:]), Hash: c.Hash, Updated: c.Updated})
			}},
			{prefixSession, func(k, v []byte) error {
				var r sessionRecord
				if err := json.Unmarshal(v, &r); err != nil || len(k) != 33 {
					return fmt.Errorf("session %x: malformed (%v)", k, err)
				}
				if !t.Before(r.Expires) {
					return nil
				}
				return sink.Session(ledger.ExportSession{Digest: [32]byte(k[1:]), AccountID: r.AccountID, Created: r.Created,
					Expires: r.Expires, CSRFToken: r.CSRFToken})
			}},
			{prefixIdem, func(k, v []byte) error {
				var r ledger.IdempotencyRecord
				if err := json.Unmarshal(v, &r); err != nil {
					return fmt.Errorf("idempotency record %q: %w", k[1:], err)
				}
				if ledger.IdemExpired(r, t) {
					return nil
				}
				return sink.Idempotency(r)
			}},
			{prefixPayment, func(k, v []byte) error {
				var p ledger.UnmatchedPayment
				if err := json.Unmarshal(v, &p); err != nil {
					return fmt.Errorf("unmatched payment %q: %w", k[1:], err)
				}
				return sink.UnmatchedPayment(p)
			}},
			{prefixPaymentIntent, func(k, v []byte) error {
				p, err := readJSON[ledger.Payment](v, fmt.Sprintf("payment %q", k[1:]))
				if err != nil {
					return err
				}
				return sink.Payment(p)
			}},
			{prefixReversal, func(k, v []byte) error {
				r, err := readJSON[ledger.Reversal](v, fmt.Sprintf("reversal %q", k[1:]))
				if err != nil {
					return err
				}
				return sink.Reversal(r)
			}},
			{prefixOutbox, func(k, v []byte) error {
				var r outboxRecord
				if err := json.Unmarshal(v, &r); err != nil {
					return fmt.Errorf("outbox record %q: %w", k[1:], err)
				}
				return sink.Mail(r.MailMessage)
			}},
			{prefixToken, func(k, v []byte) error {
				var r tokenRecord
				if err := json.Unmarshal(v, &r); err != nil || len(k) != 33 {
					return fmt.Errorf("token %x: malformed (%v)", k, err)
				}
				// Badger drops a token at its expiry by its own clock; the ledger's clock decides.
				if !t.Before(r.Expires) {
					return nil
				}
				return sink.Token(ledger.ExportToken{Digest: [32]byte(k[1:]), AccountID: r.AccountID, Purpose: r.Purpose, Expires: r.Expires})
			}},
			{prefixMember, exportMember(sink)},
			{prefixMemberUsage, exportMemberUsage(sink)},
			{prefixOperator, func(k, v []byte) error {
				r, err := readJSON[operatorRecord](v, fmt.Sprintf("operator %q", k[1:]))
				if err != nil {
					return err
				}
				x := ledger.ExportOperator{Operator: r.operator(), Hash: r.Hash, TOTPSealed: r.TOTPSealed, LastStep: r.LastStep}
				for _, h := range r.Recovery {
					d, err := hex.DecodeString(h)
					if err != nil || len(d) != 32 {
						return fmt.Errorf("operator %q: a malformed recovery digest", r.ID)
					}
					x.Recovery = append(x.Recovery, [32]byte(d))
				}
				return sink.Operator(x)
			}},
			{prefixAudit, func(k, v []byte) error {
				r, err := readJSON[ledger.AuditRecord](v, fmt.Sprintf("audit record %x", k[1:]))
				if err != nil {
					return err
				}
				return sink.Audit(r)
			}},
			{prefixCode, func(k, v []byte) error {
				r, err := readJSON[codeRecord](v, fmt.Sprintf("code %q", k[1:]))
				if err != nil {
					return err
				}
				return sink.Code(ledger.ExportCode{RedemptionCode: r.RedemptionCode, Digest: r.Digest})
			}},
			{prefixCodeRedeem, func(k, v []byte) error {
				r, err := readJSON[ledger.CodeRedemption](v, fmt.Sprintf("redemption %q", k[1:]))
				if err != nil {
					return err
				}
				return sink.CodeRedemption(r)
			}},
			{prefixTopUpRule, func(k, v []byte) error {
				r, err := readJSON[ledger.TopUpRule](v, fmt.Sprintf("top-up rule %q", k[1:]))
				if err != nil {
					return err
				}
				return sink.TopUpRule(r)
			}},
			{prefixTopUp, func(k, v []byte) error {
				r, err := readJSON[ledger.TopUp](v, fmt.Sprintf("top-up %q", k[1:]))
				if err != nil {
					return err
				}
				return sink.TopUp(r)
			}},
			{prefixAlertEndpoint, func(k, v []byte) error {
				r, err := readJSON[ledger.AlertEndpoint](v, fmt.Sprintf("alert endpoint %q", k[1:]))
				if err != nil {
					return err
				}
				return sink.AlertEndpoint(r)
			}},
			{prefixAlertDelivery, func(k, v []byte) error {
				r, err := readJSON[ledger.AlertDelivery](v, fmt.Sprintf("alert delivery %q", k[1:]))
				if err != nil {
					return err
				}
				return sink.AlertDelivery(r)
			}},
		}
		cnt := &exportCounter{}
		if ps, ok := sink.(ledger.ExportProgressSink); ok {
			prefixes := []byte{prefixReceiptKey, prefixReceiptDigest} // exportReceipts'
			for _, st := range steps {
				prefixes = append(prefixes, st.prefix)
			}
			if err := cnt.start(ctx, txn, ps, prefixes); err != nil {
				return err
			}
		}
		for _, st := range steps {
			if err := iterate(txn, []byte{st.prefix}, func(k, v []byte) error {
				if err := ctx.Err(); err != nil {
					return err
				}
				cnt.tick()
				return st.each(k, v)
			}); err != nil {
				return err
			}
		}
		if err := exportReceipts(txn, sink, cnt.tick); err != nil {
			return err
		}
		cnt.end()
		return nil
	})
}

// exportProgressEvery is how many records an Export gives between two calls of its
// ExportProgressSink.
const exportProgressEvery = 1024

// exportCounter counts the records an Export has given, for its ExportProgressSink (none: it
// counts nothing).
type exportCounter struct {
	sink        ledger.ExportProgressSink
	done, total int64
}

// start counts the records under prefixes, reading their keys only, and tells sink the total.
func (c *exportCounter) start(ctx context.Context, txn *badger.Txn, sink ledger.ExportProgressSink, prefixes []byte) error {
	for _, p := range prefixes {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{p}})
		for it.Rewind(); it.Valid(); it.Next() {
			if c.total++; c.total%4096 == 0 {
				if err := ctx.Err(); err != nil {
					it.Close()
					return err
				}
			}
		}
		it.Close()
	}
	c.sink = sink
	sink.ExportProgress(0, c.total)
	return nil
}

func (c *exportCounter) tick() {
	if c.sink == nil {
		return
	}
	if c.done++; c.done%exportProgressEvery == 0 {
		c.sink.ExportProgress(c.done, c.total)
	}
}

func (c *exportCounter) end() {
	if c.sink != nil {
		c.sink.ExportProgress(c.done, c.total)
	}
}

// Interface guards
var _ ledger.Exporter = (*Badger)(nil)

// lotWalk reads the lots in key order beside the accounts, which come in the same order (both
// keys start with the account id).
type lotWalk struct{ it *badger.Iterator }

// of returns the lots of account id, passing over those of accounts before it (a lot of no
// account, which verify reports).
func (w *lotWalk) of(id string) ([]ledger.Lot, error) {
	var out []ledger.Lot
	for ; w.it.Valid(); w.it.Next() {
		item := w.it.Item()
		k := item.Key()
		if len(k) < 1+ledger.AccountIDLen {
			return nil, fmt.Errorf("lot %x: malformed key", k)
		}
		acct := string(k[1 : 1+ledger.AccountIDLen])
		if acct > id {
			break
		}
		if acct < id {
			continue
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return nil, err
		}
		var l ledger.Lot
		if err := json.Unmarshal(v, &l); err != nil {
			return nil, fmt.Errorf("lot %x: %w", k, err)
		}
		out = append(out, l)
	}
	return out, nil
}

func sortedLots(l []ledger.Lot) []ledger.Lot {
	ledger.SortLots(l)
	return l
}

// openTakes is what an open hold took of the account's lots; a resolved hold's takes are spent
// or given back, and are not exported.
func openTakes(h holdRecord) []ledger.LotTake {
	if h.State != ledger.HoldOpen {
		return nil
	}
	return h.Lots
}
