package ledger

import (
	"context"
	"encoding/json"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// UsageByKey counts an account's entries per key, tool and mode. The account's entries are in
// time order, so a query from q.From reads them newest first and stops past it (as Usage does).
func (s *Badger) UsageByKey(ctx context.Context, q UsageQuery) ([]KeyUsageRow, error) {
	if err := CheckKeyUsageQuery(q); err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	if _, err := s.account(q.AccountID); err != nil {
		return nil, err
	}
	type rowKey struct {
		key, tool string
		mode      Mode
	}
	rows := map[rowKey]*KeyUsageRow{}
	n := 0
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: entryPrefix(q.AccountID), Reverse: true, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		for it.Seek(entryKey(q.AccountID, ^uint64(0))); it.Valid(); it.Next() {
			if n++; n%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			var e Entry
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &e) }); err != nil {
				return fmt.Errorf("entry %x: %w", it.Item().Key(), err)
			}
			if !q.From.IsZero() && e.Time.Before(q.From.Add(-usageClockSlack)) {
				return nil
			}
			if e.Kind != KindHold && e.Kind != KindSettle && e.Kind != KindVoid {
				continue
			}
			if (!q.From.IsZero() && e.Time.Before(q.From)) || (!q.To.IsZero() && !e.Time.Before(q.To)) {
				continue
			}
			rk := rowKey{e.KeyID, e.Tool, e.Mode}
			r := rows[rk]
			if r == nil {
				r = &KeyUsageRow{KeyID: e.KeyID, Tool: e.Tool, Mode: e.Mode}
				rows[rk] = r
			}
			switch e.Kind {
			case KindHold:
				r.Requests++
			case KindSettle:
				r.Settled++
			case KindVoid:
				r.Voided++
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]KeyUsageRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	SortKeyUsage(out)
	return out, nil
}
