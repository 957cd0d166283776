package ledger

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

type acctCheck struct {
	id      string
	sums    map[Mode]*modeSums // after every entry
	cut     map[Mode]modeSums  // after the entries the in-memory snapshot had applied
	lastSeq uint64
	negBal  bool
	negAv   bool
	badLine bool
	gap     bool
}

type memSnapshot struct {
	bal, testBal, held, testHeld int64
	nextSeq                      uint64
}

// Verify recomputes every account's balances from its entries and reports each difference with
// the stored balance records and the in-memory state, every negative balance or available
// figure, entries whose balance_after/available_after or numbering are wrong, open holds that
// disagree with the entries or outlived their expiry (plus two sweep intervals of grace), and
// broken indexes. It reads one consistent snapshot and does not stop other calls.
func (s *Badger) Verify(ctx context.Context) (VerifyReport, error) {
	if err := s.begin(); err != nil {
		return VerifyReport{}, err
	}
	defer s.end()

	// Snapshot memory first, then wait until everything it reflects is durable: the Badger
	// snapshot taken after that contains at least those entries.
	mem := map[string]memSnapshot{}
	for _, a := range s.allAccounts() {
		a.mu.Lock()
		mem[a.id] = memSnapshot{a.bal, a.testBal, a.held, a.testHeld, a.nextSeq}
		a.mu.Unlock()
	}
	if err := s.c.barrier(); err != nil {
		return VerifyReport{}, err
	}

	rep := VerifyReport{Problems: []Problem{}}
	add := func(acct, kind, format string, args ...any) {
		rep.Problems = append(rep.Problems, Problem{AccountID: acct, Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	checks := map[string]*acctCheck{}
	check := func(id string) *acctCheck {
		c := checks[id]
		if c == nil {
			c = &acctCheck{id: id, sums: map[Mode]*modeSums{Live: {}, Test: {}}, cut: map[Mode]modeSums{}}
			checks[id] = c
		}
		return c
	}
	t := now()
	// An open hold is a problem once the sweep should have voided it: two sweep intervals (at
	// least a minute) after its expiry.
	grace := max(s.opts.SweepInterval*2, time.Minute)

	err := s.db.View(func(txn *badger.Txn) error {
		accounts := map[string]Account{}
		if err := iterate(txn, []byte{prefixAccount}, func(k, v []byte) error {
			var a Account
			if err := json.Unmarshal(v, &a); err != nil {
				add(string(k[1:]), "corrupt_record", "account record: %v", err)
				return nil
			}
			accounts[a.ID] = a
			return nil
		}); err != nil {
			return err
		}
		rep.Accounts = len(accounts)
		if err := iterate(txn, []byte{prefixEmail}, func(k, v []byte) error {
			if a, ok := accounts[string(v)]; !ok || a.Email != string(k[1:]) {
				add(string(v), "email_index", "email %q points at account %q, which does not have it", k[1:], v)
			}
			return nil
		}); err != nil {
			return err
		}
		for _, a := range accounts {
			if _, ok, err := getValue(txn, emailKey(a.Email)); err != nil {
				return err
			} else if !ok {
				add(a.ID, "email_index", "email %q is not indexed", a.Email)
			}
		}

		// Entries, in (account, seq) order.
		n := 0
		if err := iterate(txn, []byte{prefixEntry}, func(k, v []byte) error {
			if n++; n%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			rep.Entries++
			if len(k) != 1+accountIDLen+8 {
				add("", "corrupt_record", "malformed entry key %x", k)
				return nil
			}
			id := string(k[1 : 1+accountIDLen])
			seq := binary.BigEndian.Uint64(k[1+accountIDLen:])
			c := check(id)
			var e Entry
			if err := json.Unmarshal(v, &e); err != nil {
				add(id, "corrupt_record", "entry %d: %v", seq, err)
				return nil
			}
			if seq != c.lastSeq+1 && !c.gap {
				c.gap = true
				add(id, "seq_gap", "entry %d follows entry %d", seq, c.lastSeq)
			}
			c.lastSeq = seq
			if e.Seq != seq || e.AccountID != id {
				add(id, "corrupt_record", "entry %d says it is entry %d of %q", seq, e.Seq, e.AccountID)
			}
			if e.Mode != Live && e.Mode != Test {
				add(id, "corrupt_record", "entry %d has mode %q", seq, e.Mode)
				return nil
			}
			ms := c.sums[e.Mode]
			ms.apply(e.Kind, e.Amount)
			if m, ok := mem[id]; ok && seq < m.nextSeq {
				c.cut[e.Mode] = *ms
			}
			negBal, negAv := ms.negative()
			if negBal && !c.negBal {
				c.negBal = true
				add(id, "negative_balance", "%s balance is %d after entry %d", e.Mode, ms.bal, seq)
			}
			if negAv && !c.negAv {
				c.negAv = true
				add(id, "negative_available", "%s available is %d after entry %d", e.Mode, ms.bal-ms.open, seq)
			}
			if (e.BalanceAfter != ms.bal || e.AvailableAfter != ms.bal-ms.open) && !c.badLine {
				c.badLine = true
				add(id, "entry_mismatch", "entry %d records balance %d / available %d, the entries before it give %d / %d",
					seq, e.BalanceAfter, e.AvailableAfter, ms.bal, ms.bal-ms.open)
			}
			return nil
		}); err != nil {
			return err
		}
		for id := range checks {
			if _, ok := accounts[id]; !ok {
				add(id, "orphan_entries", "entries of an account that does not exist")
			}
		}

		// Stored balance records against the entries.
		balances := map[string]bool{}
		if err := iterate(txn, []byte{prefixBalance}, func(k, v []byte) error {
			id := string(k[1:])
			balances[id] = true
			var rec balanceRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				add(id, "corrupt_record", "balance record: %v", err)
				return nil
			}
			c := check(id)
			if rec.Balance != c.sums[Live].bal || rec.TestBalance != c.sums[Test].bal {
				add(id, "balance_mismatch", "stored balance %d / test %d, entries sum to %d / %d",
					rec.Balance, rec.TestBalance, c.sums[Live].bal, c.sums[Test].bal)
			}
			switch {
			case rec.NextSeq > c.lastSeq+1:
				add(id, "seq_gap", "entries %d to %d are missing (stored next entry number %d)", c.lastSeq+1, rec.NextSeq-1, rec.NextSeq)
			case rec.NextSeq < c.lastSeq+1:
				add(id, "balance_mismatch", "stored next entry number %d, but entry %d exists", rec.NextSeq, c.lastSeq)
			}
			return nil
		}); err != nil {
			return err
		}
		for id := range accounts {
			if !balances[id] {
				add(id, "missing_balance_record", "account has no balance record")
			}
		}

		// Open holds: each must be open, have its hold entry, be counted by the entries, and
		// not be long past its expiry.
		open := map[string]map[Mode]int64{}
		if err := iterate(txn, []byte{prefixOpenHold}, func(k, _ []byte) error {
			if len(k) <= 1+accountIDLen {
				add("", "corrupt_record", "malformed open-hold key %x", k)
				return nil
			}
			id, rid := string(k[1:1+accountIDLen]), string(k[1+accountIDLen:])
			rec, err := getHold(txn, id, rid)
			if err != nil {
				add(id, "hold_without_record", "open hold %q: %v", rid, err)
				return nil
			}
			if rec.State != HoldOpen {
				add(id, "open_hold_mismatch", "hold %q is indexed as open but is %s", rid, rec.State)
			}
			if open[id] == nil {
				open[id] = map[Mode]int64{}
			}
			open[id][rec.Mode]++
			v, ok, err := getValue(txn, entryKey(id, rec.HoldSeq))
			if err != nil {
				return err
			}
			var e Entry
			if !ok || json.Unmarshal(v, &e) != nil || e.Kind != KindHold || e.RequestID != rid {
				add(id, "hold_without_entry", "open hold %q has no hold entry at %d", rid, rec.HoldSeq)
			}
			if rec.Expires.Add(grace).Before(t) {
				add(id, "expired_open_hold", "hold %q expired at %s and is still open", rid, rec.Expires.Format(time.RFC3339))
			}
			return nil
		}); err != nil {
			return err
		}
		for id := range open {
			check(id)
		}
		for id, c := range checks {
			for _, m := range []Mode{Live, Test} {
				if got := open[id][m]; got != c.sums[m].open {
					add(id, "open_hold_mismatch", "%d open %s holds, the entries leave %d open", got, m, c.sums[m].open)
				}
			}
		}
		return nil
	})
	if err != nil {
		return VerifyReport{}, fmt.Errorf("verifying ledger: %w", err)
	}

	// The in-memory state against the entries it had applied.
	for id, m := range mem {
		c := check(id)
		live, test := c.cut[Live], c.cut[Test]
		if m.bal != live.bal || m.testBal != test.bal || m.held != live.open || m.testHeld != test.open {
			add(id, "memory_mismatch", "in memory balance %d, test %d, open holds %d, test %d; entries give %d, %d, %d, %d",
				m.bal, m.testBal, m.held, m.testHeld, live.bal, test.bal, live.open, test.open)
		}
		if m.bal-m.held < -live.reversed || m.testBal-m.testHeld < 0 {
			add(id, "negative_available", "in memory available %d, test %d", m.bal-m.held, m.testBal-m.testHeld)
		}
	}
	sort.SliceStable(rep.Problems, func(i, j int) bool { return rep.Problems[i].AccountID < rep.Problems[j].AccountID })
	rep.OK = len(rep.Problems) == 0
	return rep, nil
}
