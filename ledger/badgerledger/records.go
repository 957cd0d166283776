package badgerledger

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// The stored forms of the Badger engine's own records, and how to read records back. The keys
// they live under are in prefix.go.

// balanceRecord is the stored form of an account's balances (prefixBalance). Open holds are not
// stored here: they are counted from the open-hold index.
type balanceRecord struct {
	Balance     int64  `json:"balance"`
	TestBalance int64  `json:"test_balance"`
	NextSeq     uint64 `json:"next_seq"`
}

// holdRecord is the stored form of a hold (prefixHold).
type holdRecord struct {
	AccountID  string           `json:"account_id"`
	RequestID  string           `json:"request_id"`
	Mode       ledger.Mode      `json:"mode"`
	State      ledger.HoldState `json:"state"`
	KeyID      string           `json:"key_id,omitempty"`
	Tool       string           `json:"tool,omitempty"`
	Created    time.Time        `json:"created"`
	Expires    time.Time        `json:"expires"`
	HoldSeq    uint64           `json:"hold_seq"`
	Resolved   time.Time        `json:"resolved,omitzero"`
	ResolveSeq uint64           `json:"resolve_seq,omitempty"`
	Reason     string           `json:"reason,omitempty"`
	// Credits is what the hold reserved; absent from a hold written before tools had prices,
	// which reserved one (ledger.HeldCredits).
	Credits int64 `json:"credits,omitempty"`
	// Lots is what the hold took of the account's credits that expire (expiry.go).
	Lots []ledger.LotTake `json:"lots,omitempty"`
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only plain structs of strings, numbers and times are marshalled here.
		panic(fmt.Sprintf("ledger: marshalling %T: %v", v, err))
	}
	return b
}

func seqBytes(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// iterate calls f with a copy of every value under prefix, in key order.
func iterate(txn *badger.Txn, prefix []byte, f func(k, v []byte) error) error {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 64})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		if err := f(item.KeyCopy(nil), v); err != nil {
			return err
		}
	}
	return nil
}

// countKeys counts the keys under prefix, reading no value.
func countKeys(txn *badger.Txn, prefix []byte) (int64, error) { return countKeysUpTo(txn, prefix, -1) }

// countKeysUpTo is countKeys that stops at most (negative: no limit).
func countKeysUpTo(txn *badger.Txn, prefix []byte, most int64) (int64, error) {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	n := int64(0)
	for it.Rewind(); it.Valid() && n != most; it.Next() {
		n++
	}
	return n, nil
}

// scanJSON reads, under the engine's guard and in one snapshot, every JSON record under prefix in
// key order, decoded as T (what names one in errors), and hands it to keep until keep says the
// listing is full; ctx ends it early. The listings of records few enough to read whole use it.
func scanJSON[T any](ctx context.Context, s *Badger, prefix byte, what string, keep func(T) (full bool)) error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.life.End()
	err := s.db.View(func(txn *badger.Txn) error {
		return iterate(txn, []byte{prefix}, func(k, v []byte) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			var rec T
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("%s %q: %w", what, k[1:], err)
			}
			if keep(rec) {
				return errListFull
			}
			return nil
		})
	})
	if errors.Is(err, errListFull) {
		return nil
	}
	return err
}

// errListFull ends a scanJSON whose listing is full.
var errListFull = errors.New("list full")

// getValue reads one value; ok is false when the key does not exist.
func getValue(txn *badger.Txn, k []byte) (v []byte, ok bool, err error) {
	item, err := txn.Get(k)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v, err = item.ValueCopy(nil)
	return v, err == nil, err
}

// get reads one value in a read-only transaction of its own; ok is false when the key does not
// exist.
func (s *Badger) get(k []byte) (v []byte, ok bool, err error) {
	err = s.db.View(func(txn *badger.Txn) error {
		v, ok, err = getValue(txn, k)
		return err
	})
	return v, ok, err
}

func getHold(txn *badger.Txn, acct, rid string) (holdRecord, error) {
	var rec holdRecord
	v, ok, err := getValue(txn, holdKey(acct, rid))
	if err != nil {
		return rec, err
	}
	if !ok {
		return rec, ledger.ErrNotFound
	}
	return rec, json.Unmarshal(v, &rec)
}
