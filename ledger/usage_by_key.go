package ledger

import (
	"cmp"
	"context"
	"fmt"
	"slices"
)

// Usage by key, for every engine (badgerledger/usage_by_key.go, pgledger/usage_by_key.go): an
// account's requests, charged credits and voided holds per API key, tool and mode, so that a
// customer sees which of their keys (apps, team members, environments) spent what.

// KeyUsageRow is one key's use of one tool in one mode.
type KeyUsageRow struct {
	KeyID    string `json:"key_id"`
	Tool     string `json:"tool"`
	Mode     Mode   `json:"mode"`
	Requests int64  `json:"requests"` // holds opened
	Settled  int64  `json:"settled"`  // holds settled (charged)
	Voided   int64  `json:"voided"`
	Credits  int64  `json:"credits"` // credits the settles charged
}

// KeyReports is the role of usage by key.
type KeyReports interface {
	// UsageByKey counts holds, settles and voids per key, tool and mode of q.AccountID (which
	// is required) with times in [q.From, q.To) (zero: unbounded), ordered by key, tool and
	// mode.
	//
	// Expected errors:
	//   - ErrInvalidArgument: q.AccountID is empty.
	//   - ErrNotFound: no account has q.AccountID.
	//   - ErrClosed; ctx's error.
	UsageByKey(ctx context.Context, q UsageQuery) ([]KeyUsageRow, error)
}

func CheckKeyUsageQuery(q UsageQuery) error {
	if q.AccountID == "" {
		return fmt.Errorf("usage by key needs an account: %w", ErrInvalidArgument)
	}
	return nil
}

func SortKeyUsage(rows []KeyUsageRow) {
	slices.SortFunc(rows, func(a, b KeyUsageRow) int {
		return cmp.Or(cmp.Compare(a.KeyID, b.KeyID), cmp.Compare(a.Tool, b.Tool), cmp.Compare(a.Mode, b.Mode))
	})
}
