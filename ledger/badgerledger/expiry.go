package badgerledger

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// Credits that expire on the Badger engine (ledger/expiry.go has the rules). An account's lots
// live in memory with the account while it is cached (account.lots, sorted by ledger.SortLots; nil for the accounts without any,
// whose holds therefore do nothing more) and on disk under prefixLot, one record per lot,
// dropped once nothing of it is left or held. What a hold took of them is on its holdRecord.
// Beside each lot, prefixLotDue orders the lots by expiry, so that the sweep reads the lots
// whose expiry has come and no other.

func lotKey(acct string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(key1(prefixLot, acct), seq)
}

func lotDueKey(acct string, l *ledger.Lot) []byte {
	k := binary.BigEndian.AppendUint64([]byte{prefixLotDue}, uint64(l.Expires.UnixNano()))
	return binary.BigEndian.AppendUint64(append(k, acct...), l.Seq)
}

// lotDueAccount is the account of a prefixLotDue key, and whether its expiry is after t.
func lotDueAccount(k []byte, t time.Time) (acct string, later bool, ok bool) {
	if len(k) != 1+8+ledger.AccountIDLen+8 {
		return "", false, false
	}
	exp := int64(binary.BigEndian.Uint64(k[1:9]))
	return string(k[9 : 9+ledger.AccountIDLen]), exp > t.UnixNano(), true
}

// lot returns the account's lot of grant entry seq, or nil. Called with a.mu held.
func (a *account) lot(seq uint64) *ledger.Lot {
	for i := range a.lots {
		if a.lots[i].Seq == seq {
			return &a.lots[i]
		}
	}
	return nil
}

// addLot adds a lot and appends its writes to ws. Called with a.mu held.
func (a *account) addLot(ws []write, l ledger.Lot) []write {
	a.lots = append(a.lots, l)
	ledger.SortLots(a.lots)
	return append(ws, set(lotKey(a.id, l.Seq), mustJSON(l)), set(lotDueKey(a.id, &l), nil))
}

// lotWrites returns the writes of the lots of seqs as they are now, dropping those with nothing
// left or held. Called with a.mu held.
func (a *account) lotWrites(ws []write, seqs ...uint64) []write {
	for _, seq := range seqs {
		l := a.lot(seq)
		if l == nil {
			continue
		}
		if l.Remaining == 0 && l.Held == 0 {
			ws = append(ws, del(lotKey(a.id, seq)), del(lotDueKey(a.id, l)))
			a.dropLot(seq)
			continue
		}
		ws = append(ws, set(lotKey(a.id, seq), mustJSON(*l)))
	}
	return ws
}

func (a *account) dropLot(seq uint64) {
	for i := range a.lots {
		if a.lots[i].Seq == seq {
			a.lots = append(a.lots[:i], a.lots[i+1:]...)
			break
		}
	}
	if len(a.lots) == 0 {
		a.lots = nil
	}
}

// lotsDue reports whether a lot has expired by t with credits left that no hold keeps.
// Called with a.mu held.
func (a *account) lotsDue(t time.Time) bool {
	for _, l := range a.lots {
		if !l.Expires.After(t) && l.Remaining > l.Held {
			return true
		}
	}
	return false
}

// expireDue expires, at t, what is left and not held of every lot whose expiry has come: one
// entry of kind expire per lot, never taking the available credits below zero (a refund may
// have taken them already). It returns the writes. Called with a.mu held.
func (a *account) expireDue(ws []write, t time.Time) []write {
	var seqs []uint64
	for i := range a.lots {
		l := &a.lots[i]
		if l.Expires.After(t) || l.Remaining <= l.Held {
			continue
		}
		bal, held := a.figures(ledger.Live)
		n := min(l.Remaining-l.Held, max(bal-held, 0))
		l.Remaining = l.Held
		seqs = append(seqs, l.Seq)
		if n > 0 {
			_, ews := a.appendEntry(ledger.Entry{Kind: ledger.KindExpire, Mode: ledger.Live, Reason: ledger.ExpireReason(l.Seq)}, -n, 0, t)
			ws = append(ws, ews...)
		}
	}
	return a.lotWrites(ws, seqs...)
}

// takeLots takes price from the lots for a hold made at t and returns the takes and the lots'
// writes. Called with a.mu held.
func (a *account) takeLots(ws []write, price int64, t time.Time) ([]ledger.LotTake, []write) {
	if len(a.lots) == 0 {
		return nil, ws
	}
	takes := ledger.AllocateLots(a.lots, price, t)
	for _, tk := range takes {
		ws = a.lotWrites(ws, tk.Seq)
	}
	return takes, ws
}

// releaseLots resolves what a hold took: a settle spends it, a void gives it back (and what
// it gives back of a lot expired by t expires at once, in expireDue). Called with a.mu held.
func (a *account) releaseLots(ws []write, takes []ledger.LotTake, settle bool) []write {
	for _, tk := range takes {
		l := a.lot(tk.Seq)
		if l == nil {
			continue // verify reports it
		}
		l.Held -= tk.Credits
		if settle {
			l.Remaining -= tk.Credits
		}
		ws = a.lotWrites(ws, tk.Seq)
	}
	return ws
}

// liveBalance is a.balance() with what of the live credits expires after t.
// Called with a.mu held.
func (a *account) liveBalance(t time.Time) ledger.Balance {
	b := a.balance()
	if len(a.lots) > 0 {
		b.Expiring = ledger.ExpiringOf(a.lots, t)
	}
	return b
}

// indexLots writes the expiry order of a ledger's lots (prefixLotDue) where a ledger written
// before it has lots and no order: once, at Open, before anything else writes.
func indexLots(db *badger.DB) error {
	var have int64
	if err := db.View(func(txn *badger.Txn) error {
		var err error
		have, err = countKeysUpTo(txn, []byte{prefixLotDue}, 1)
		return err
	}); err != nil || have > 0 {
		return err
	}
	wb := db.NewWriteBatch()
	defer wb.Cancel()
	if err := db.View(func(txn *badger.Txn) error {
		return iterate(txn, []byte{prefixLot}, func(k, v []byte) error {
			var l ledger.Lot
			if len(k) != 1+ledger.AccountIDLen+8 || json.Unmarshal(v, &l) != nil {
				return fmt.Errorf("malformed lot %q", k)
			}
			return wb.Set(lotDueKey(string(k[1:1+ledger.AccountIDLen]), &l), nil)
		})
	}); err != nil {
		return err
	}
	return wb.Flush()
}
