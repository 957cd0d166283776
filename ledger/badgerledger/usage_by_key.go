package badgerledger

import (
	"context"
	"encoding/json"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
)

// UsageByKey counts an account's entries per key, tool and mode. The account's entries are in
// time order, so a query from q.From reads them newest first and stops past it (as Usage does).
func (s *Badger) UsageByKey(ctx context.Context, q ledger.UsageQuery) ([]ledger.KeyUsageRow, error) {
	if err := ledger.CheckKeyUsageQuery(q); err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	if err := s.exists(q.AccountID); err != nil {
		return nil, err
	}
	type rowKey struct {
		key, tool string
		mode      ledger.Mode
	}
	rows := map[rowKey]*ledger.KeyUsageRow{}
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
			var e ledger.Entry
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &e) }); err != nil {
				return fmt.Errorf("entry %x: %w", it.Item().Key(), err)
			}
			if !q.From.IsZero() && e.Time.Before(q.From.Add(-usageClockSlack)) {
				return nil
			}
			if e.Kind != ledger.KindHold && e.Kind != ledger.KindSettle && e.Kind != ledger.KindVoid {
				continue
			}
			if (!q.From.IsZero() && e.Time.Before(q.From)) || (!q.To.IsZero() && !e.Time.Before(q.To)) {
				continue
			}
			rk := rowKey{e.KeyID, e.Tool, e.Mode}
			r := rows[rk]
			if r == nil {
				r = &ledger.KeyUsageRow{KeyID: e.KeyID, Tool: e.Tool, Mode: e.Mode}
				rows[rk] = r
			}
			switch e.Kind {
			case ledger.KindHold:
				r.Requests++
			case ledger.KindSettle:
				r.Settled++
				r.Credits -= e.Amount
			case ledger.KindVoid:
				r.Voided++
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]ledger.KeyUsageRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	ledger.SortKeyUsage(out)
	return out, nil
}
