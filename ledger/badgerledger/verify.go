package badgerledger

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// acctCheck is what Verify has recomputed of one account, from its entries.
type acctCheck struct {
	id      string
	sums    [2]ledger.ModeSums // after every entry, by modeIndex
	cut     [2]ledger.ModeSums // after the entries the in-memory snapshot had applied
	lastSeq uint64
	negBal  bool
	negAv   bool
	badLine bool
	gap     bool
	// granted is what each live grant or purchase gave, expired what expire entries took of
	// each lot (by the grant's entry), for ledger.LotProblems.
	granted, expired map[uint64]int64
}

// modeIndex is a mode's place in acctCheck's arrays; ok is false for an unknown mode.
func modeIndex(m ledger.Mode) (int, bool) {
	switch m {
	case ledger.Live:
		return 0, true
	case ledger.Test:
		return 1, true
	}
	return 0, false
}

type memSnapshot struct {
	id                           string
	bal, testBal, held, testHeld int64
	nextSeq                      uint64
}

// Verify recomputes every account's balances from its entries and reports each difference with
// the stored balance records and the in-memory state, every negative balance or available
// figure, entries whose balance_after/available_after or numbering are wrong, open holds that
// disagree with the entries or outlived their expiry (plus two sweep intervals of grace), and
// broken indexes. It reads one consistent snapshot and does not stop other calls.
//
// It reads one account at a time: the records of each type are in account order, so one cursor
// per type (accounts, balances, entries, open holds, and the in-memory figures) walks them side
// by side, and what it keeps beyond the account in hand is the in-memory figures and the
// problems. A ledger of millions of entries is verified in the memory of a few accounts.
func (s *Badger) Verify(ctx context.Context) (ledger.VerifyReport, error) {
	return s.VerifyProgress(ctx, nil)
}

// VerifyProgress is Verify that reports the accounts it has verified of those on disk
// (ledger.ProgressVerifier), after each account.
func (s *Badger) VerifyProgress(ctx context.Context, progress ledger.ProgressFunc) (ledger.VerifyReport, error) {
	if progress == nil {
		progress = func(int64, int64) {}
	}
	if err := s.begin(); err != nil {
		return ledger.VerifyReport{}, err
	}
	defer s.life.End()

	// Snapshot memory first (the cached accounts: an account that is not cached has nothing in
	// memory that its records lack), then wait until everything it reflects is durable: the
	// Badger snapshot taken after that contains at least those entries.
	accts := s.cachedAccounts()
	mem := make([]memSnapshot, 0, len(accts))
	for _, a := range accts {
		a.mu.Lock()
		mem = append(mem, memSnapshot{a.id, a.bal, a.testBal, a.held, a.testHeld, a.nextSeq})
		a.mu.Unlock()
		s.unpin(a)
	}
	accts = nil
	slices.SortFunc(mem, func(x, y memSnapshot) int { return strings.Compare(x.id, y.id) })
	if err := s.c.barrier(); err != nil {
		return ledger.VerifyReport{}, err
	}
	total, done := int64(0), int64(0)
	if err := s.db.View(func(txn *badger.Txn) error {
		var err error
		total, err = countKeys(txn, []byte{prefixAccount})
		return err
	}); err != nil {
		return ledger.VerifyReport{}, err
	}
	progress(0, total)

	rep := ledger.VerifyReport{Problems: []ledger.Problem{}}
	add := func(acct, kind, format string, args ...any) {
		rep.Problems = append(rep.Problems, ledger.Problem{AccountID: acct, Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	t := s.now()
	// An open hold is a problem once the sweep should have voided it: two sweep intervals (at
	// least a minute) after its expiry.
	grace := max(s.opts.SweepInterval*2, time.Minute)

	err := s.db.View(func(txn *badger.Txn) error {
		// The e-mail index, against the account records it points at.
		if err := iterate(txn, []byte{prefixEmail}, func(k, v []byte) error {
			var a ledger.Account
			rv, ok, err := getValue(txn, accountKey(string(v)))
			if err != nil {
				return err
			}
			if !ok || json.Unmarshal(rv, &a) != nil || a.Email != string(k[1:]) {
				add(string(v), "email_index", "email %q points at account %q, which does not have it", k[1:], v)
			}
			return nil
		}); err != nil {
			return err
		}

		accountsC := newVerifyCursor(txn, prefixAccount, func(k []byte) (string, bool) { return string(k[1:]), true })
		defer accountsC.close()
		balancesC := newVerifyCursor(txn, prefixBalance, func(k []byte) (string, bool) { return string(k[1:]), true })
		defer balancesC.close()
		perAccount := func(n int) func(k []byte) (string, bool) {
			return func(k []byte) (string, bool) {
				if len(k) < 1+ledger.AccountIDLen+n {
					return "", false
				}
				return string(k[1 : 1+ledger.AccountIDLen]), true
			}
		}
		entriesC := newVerifyCursor(txn, prefixEntry, perAccount(8))
		defer entriesC.close()
		openC := newVerifyCursor(txn, prefixOpenHold, perAccount(1))
		defer openC.close()
		lotsC := newVerifyCursor(txn, prefixLot, perAccount(8))
		defer lotsC.close()
		mi := 0
		n := 0
		for {
			// The next account any record type (or memory) names.
			id, any := "", false
			for _, c := range []*verifyCursor{accountsC, balancesC, entriesC, openC, lotsC} {
				if err := c.skipMalformed(func(k []byte) {
					what := map[byte]string{prefixEntry: "entry", prefixOpenHold: "open-hold", prefixLot: "lot"}[k[0]]
					if k[0] == prefixEntry {
						rep.Entries++
					}
					add("", "corrupt_record", "malformed %s key %x", what, k)
				}); err != nil {
					return err
				}
				if c.valid() && (!any || c.acct < id) {
					id, any = c.acct, true
				}
			}
			if mi < len(mem) && (!any || mem[mi].id < id) {
				id, any = mem[mi].id, true
			}
			if !any {
				return nil
			}
			if done > 0 {
				progress(done, total)
			}
			done++
			c := &acctCheck{id: id}
			var m *memSnapshot
			if mi < len(mem) && mem[mi].id == id {
				m = &mem[mi]
				mi++
			}

			// Its account record.
			account := false
			if accountsC.at(id) {
				var a ledger.Account
				if err := json.Unmarshal(accountsC.value(), &a); err != nil {
					add(id, "corrupt_record", "account record: %v", err)
				} else {
					account = true
					rep.Accounts++
					if _, ok, err := getValue(txn, emailKey(a.Email)); err != nil {
						return err
					} else if !ok {
						add(a.ID, "email_index", "email %q is not indexed", a.Email)
					}
				}
				if err := accountsC.next(); err != nil {
					return err
				}
			}

			// Its entries, in seq order.
			entries := false
			for entriesC.at(id) {
				entries = true
				if n++; n%4096 == 0 {
					if err := ctx.Err(); err != nil {
						return err
					}
				}
				rep.Entries++
				k := entriesC.key()
				if len(k) != 1+ledger.AccountIDLen+8 {
					add("", "corrupt_record", "malformed entry key %x", k)
				} else {
					c.entry(binary.BigEndian.Uint64(k[1+ledger.AccountIDLen:]), entriesC.value(), m, add)
				}
				if err := entriesC.next(); err != nil {
					return err
				}
			}
			if entries && !account {
				add(id, "orphan_entries", "entries of an account that does not exist")
			}

			// Its stored balance record, against the entries.
			if balancesC.at(id) {
				var rec balanceRecord
				if err := json.Unmarshal(balancesC.value(), &rec); err != nil {
					add(id, "corrupt_record", "balance record: %v", err)
				} else {
					if rec.Balance != c.sums[0].Bal || rec.TestBalance != c.sums[1].Bal {
						add(id, "balance_mismatch", "stored balance %d / test %d, entries sum to %d / %d",
							rec.Balance, rec.TestBalance, c.sums[0].Bal, c.sums[1].Bal)
					}
					switch {
					case rec.NextSeq > c.lastSeq+1:
						add(id, "seq_gap", "entries %d to %d are missing (stored next entry number %d)", c.lastSeq+1, rec.NextSeq-1, rec.NextSeq)
					case rec.NextSeq < c.lastSeq+1:
						add(id, "balance_mismatch", "stored next entry number %d, but entry %d exists", rec.NextSeq, c.lastSeq)
					}
				}
				if err := balancesC.next(); err != nil {
					return err
				}
			} else if account {
				add(id, "missing_balance_record", "account has no balance record")
			}

			// Its open holds: each must be open, have its hold entry, be counted by the entries,
			// and not be long past its expiry.
			var open [2]int64
			lotHeld := map[uint64]int64{}
			for openC.at(id) {
				rid := string(openC.key()[1+ledger.AccountIDLen:])
				rec, err := getHold(txn, id, rid)
				if err != nil {
					add(id, "hold_without_record", "open hold %q: %v", rid, err)
				} else {
					if rec.State != ledger.HoldOpen {
						add(id, "open_hold_mismatch", "hold %q is indexed as open but is %s", rid, rec.State)
					}
					if i, ok := modeIndex(rec.Mode); ok {
						open[i] += ledger.HeldCredits(rec.Credits)
					}
					for _, tk := range rec.Lots {
						lotHeld[tk.Seq] += tk.Credits
					}
					v, ok, err := getValue(txn, entryKey(id, rec.HoldSeq))
					if err != nil {
						return err
					}
					var e ledger.Entry
					if !ok || json.Unmarshal(v, &e) != nil || e.Kind != ledger.KindHold || e.RequestID != rid {
						add(id, "hold_without_entry", "open hold %q has no hold entry at %d", rid, rec.HoldSeq)
					}
					if rec.Expires.Add(grace).Before(t) {
						add(id, "expired_open_hold", "hold %q expired at %s and is still open", rid, rec.Expires.Format(time.RFC3339))
					}
				}
				if err := openC.next(); err != nil {
					return err
				}
			}
			for i, md := range []ledger.Mode{ledger.Live, ledger.Test} {
				if open[i] != c.sums[i].Open {
					add(id, "open_hold_mismatch", "the open %s holds hold %d credits, the entries leave %d held", md, open[i], c.sums[i].Open)
				}
			}

			// Its lots (expiry.go), against its open holds' takes and its expire entries.
			var lots []ledger.Lot
			for lotsC.at(id) {
				var l ledger.Lot
				if err := json.Unmarshal(lotsC.value(), &l); err != nil {
					add(id, "corrupt_record", "lot %x: %v", lotsC.key(), err)
				} else {
					lots = append(lots, l)
					// The sweep finds a lot by its expiry: one missing there would never expire.
					if _, err := txn.Get(lotDueKey(id, &l)); errors.Is(err, badger.ErrKeyNotFound) {
						add(id, "lot_not_indexed", "lot of entry %d is missing from the expiry order: it would never expire", l.Seq)
					} else if err != nil {
						return err
					}
				}
				if err := lotsC.next(); err != nil {
					return err
				}
			}
			if len(lots) > 0 || len(lotHeld) > 0 || len(c.expired) > 0 {
				for _, p := range ledger.LotProblems(id, lots, lotHeld, c.expired, c.granted) {
					add(p.AccountID, p.Kind, "%s", p.Detail)
				}
			}

			// The in-memory state against the entries it had applied.
			if m != nil {
				live, test := c.cut[0], c.cut[1]
				if m.bal != live.Bal || m.testBal != test.Bal || m.held != live.Open || m.testHeld != test.Open {
					add(id, "memory_mismatch", "in memory balance %d, test %d, held %d, test %d; entries give %d, %d, %d, %d",
						m.bal, m.testBal, m.held, m.testHeld, live.Bal, test.Bal, live.Open, test.Open)
				}
				if m.bal-m.held < -live.Reversed || m.testBal-m.testHeld < 0 {
					add(id, "negative_available", "in memory available %d, test %d", m.bal-m.held, m.testBal-m.testHeld)
				}
			}
		}
	})
	if err != nil {
		return ledger.VerifyReport{}, fmt.Errorf("verifying ledger: %w", err)
	}
	if err := s.db.View(func(txn *badger.Txn) error { return verifyCodes(ctx, txn, add) }); err != nil {
		return ledger.VerifyReport{}, fmt.Errorf("verifying codes: %w", err)
	}
	progress(done, total)
	sort.SliceStable(rep.Problems, func(i, j int) bool { return rep.Problems[i].AccountID < rep.Problems[j].AccountID })
	rep.OK = len(rep.Problems) == 0
	return rep, nil
}

// entry applies the account's entry seq (its stored JSON v) to c and reports what is wrong with
// it; m is the account's in-memory snapshot, nil when memory has no such account.
func (c *acctCheck) entry(seq uint64, v []byte, m *memSnapshot, add func(acct, kind, format string, args ...any)) {
	id := c.id
	var e ledger.Entry
	if err := json.Unmarshal(v, &e); err != nil {
		add(id, "corrupt_record", "entry %d: %v", seq, err)
		return
	}
	if seq != c.lastSeq+1 && !c.gap {
		c.gap = true
		add(id, "seq_gap", "entry %d follows entry %d", seq, c.lastSeq)
	}
	c.lastSeq = seq
	if e.Seq != seq || e.AccountID != id {
		add(id, "corrupt_record", "entry %d says it is entry %d of %q", seq, e.Seq, e.AccountID)
	}
	i, ok := modeIndex(e.Mode)
	if !ok {
		add(id, "corrupt_record", "entry %d has mode %q", seq, e.Mode)
		return
	}
	ms := &c.sums[i]
	ms.Apply(e)
	switch {
	case e.Mode == ledger.Live && (e.Kind == ledger.KindGrant || e.Kind == ledger.KindPurchase):
		if c.granted == nil {
			c.granted = map[uint64]int64{}
		}
		c.granted[seq] = e.Amount
	case e.Kind == ledger.KindExpire:
		if lot, ok := ledger.ExpiredLot(e); ok {
			if c.expired == nil {
				c.expired = map[uint64]int64{}
			}
			c.expired[lot] -= e.Amount
		} else {
			add(id, "corrupt_record", "expire entry %d names no lot: %q", seq, e.Reason)
		}
	}
	if m != nil && seq < m.nextSeq {
		c.cut[i] = *ms
	}
	negBal, negAv := ms.Negative()
	if negBal && !c.negBal {
		c.negBal = true
		add(id, "negative_balance", "%s balance is %d after entry %d", e.Mode, ms.Bal, seq)
	}
	if negAv && !c.negAv {
		c.negAv = true
		add(id, "negative_available", "%s available is %d after entry %d", e.Mode, ms.Bal-ms.Open, seq)
	}
	if (e.BalanceAfter != ms.Bal || e.AvailableAfter != ms.Bal-ms.Open) && !c.badLine {
		c.badLine = true
		add(id, "entry_mismatch", "entry %d records balance %d / available %d, the entries before it give %d / %d",
			seq, e.BalanceAfter, e.AvailableAfter, ms.Bal, ms.Bal-ms.Open)
	}
}

// verifyCursor walks the records of one type in key order, naming the account of each (acctOf;
// false for a key too short to name one).
type verifyCursor struct {
	it     *badger.Iterator
	prefix []byte
	acctOf func(k []byte) (string, bool)
	acct   string // the current record's account, while valid
	k, v   []byte
}

func newVerifyCursor(txn *badger.Txn, prefix byte, acctOf func(k []byte) (string, bool)) *verifyCursor {
	c := &verifyCursor{prefix: []byte{prefix}, acctOf: acctOf}
	c.it = txn.NewIterator(badger.IteratorOptions{Prefix: c.prefix, PrefetchValues: true, PrefetchSize: 64})
	c.it.Rewind()
	return c
}

func (c *verifyCursor) valid() bool { return c.it.Valid() }
func (c *verifyCursor) close()      { c.it.Close() }

// load reads the current record; a malformed key leaves acct empty.
func (c *verifyCursor) load() error {
	if !c.it.Valid() {
		return nil
	}
	item := c.it.Item()
	c.k = item.KeyCopy(c.k[:0])
	v, err := item.ValueCopy(c.v[:0])
	if err != nil {
		return err
	}
	c.v = v
	c.acct, _ = c.acctOf(c.k)
	return nil
}

// skipMalformed reports (report) and passes over records whose key names no account.
func (c *verifyCursor) skipMalformed(report func(k []byte)) error {
	for c.it.Valid() {
		if c.k == nil {
			if err := c.load(); err != nil {
				return err
			}
		}
		if _, ok := c.acctOf(c.k); ok {
			return nil
		}
		report(c.k)
		if err := c.next(); err != nil {
			return err
		}
	}
	return nil
}

// at reports whether the current record belongs to account id.
func (c *verifyCursor) at(id string) bool { return c.it.Valid() && c.k != nil && c.acct == id }

func (c *verifyCursor) key() []byte   { return c.k }
func (c *verifyCursor) value() []byte { return c.v }

// next moves to the following record.
func (c *verifyCursor) next() error {
	c.it.Next()
	c.k = c.k[:0]
	if !c.it.Valid() {
		return nil
	}
	return c.load()
}

// Interface guards
var _ ledger.ProgressVerifier = (*Badger)(nil)

// verifyCodes checks every redemption code (codes.go) against its redemptions, which one commit
// writes with the use and the account's grant entry: the uses are the redemptions counted and
// never more than allowed, each redemption's account has its grant reference, and the digest
// index finds the code.
func verifyCodes(ctx context.Context, txn *badger.Txn, add func(acct, kind, format string, args ...any)) error {
	return iterate(txn, []byte{prefixCode}, func(k, v []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		var c codeRecord
		if err := json.Unmarshal(v, &c); err != nil {
			add("", "corrupt_record", "code %q: %v", k[1:], err)
			return nil
		}
		if id, ok, err := getValue(txn, codeHashKey(c.Digest)); err != nil {
			return err
		} else if !ok || string(id) != c.ID {
			add("", "code_index", "code %s is not found by its digest", c.ID)
		}
		var n int64
		if err := iterate(txn, key1(prefixCodeRedeem, c.ID), func(_, rv []byte) error {
			n++
			var r ledger.CodeRedemption
			if err := json.Unmarshal(rv, &r); err != nil {
				add("", "corrupt_record", "a redemption of code %s: %v", c.ID, err)
				return nil
			}
			if _, ok, err := getValue(txn, grantRefKey(r.AccountID, ledger.CodeReference(c.ID))); err != nil {
				return err
			} else if !ok {
				add(r.AccountID, "code_redemption", "redeemed code %s without its grant entry", c.ID)
			}
			return nil
		}); err != nil {
			return err
		}
		if n != c.Uses || c.Uses > c.MaxUses {
			add("", "code_uses", "code %s counts %d uses of %d; %d accounts redeemed it", c.ID, c.Uses, c.MaxUses, n)
		}
		return nil
	})
}
