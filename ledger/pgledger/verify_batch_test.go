package pgledger

import (
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// setVerifyBatch sets verifyBatch until the test ends.
func setVerifyBatch(t *testing.T, n int) {
	old := verifyBatch
	verifyBatch = n
	t.Cleanup(func() { verifyBatch = old })
}

// TestPostgresVerifyBatches: Verify reads the accounts a batch at a time, and the report is the
// same whatever the batch: each damaged account's problems, and entries of accounts that do not
// exist before the first account, between two batches and after the last. Progress counts the
// accounts from 0 to all of them.
func TestPostgresVerifyBatches(t *testing.T) {
	s := openPostgres(t, pgtest.NewDatabase(t), pgQuiet)
	var ids []string
	for i := range 7 {
		a := ledgertest.MustAccount(t, s, fmt.Sprintf("batch%d@example.com", i)).ID
		ledgertest.MustGrant(t, s, a, ledger.Live, 5)
		ledgertest.MustHold(t, s, a, ledger.Live, "r1")
		ids = append(ids, a)
	}
	slices.Sort(ids)
	ledgertest.VerifyClean(t, s)

	tx, err := s.pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(bg)
	// Entries whose account does not exist get past the foreign key only this way.
	if _, err := tx.Exec(bg, `SET LOCAL session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	orphans := []string{"a", ids[2] + "~", "zzz"}
	for _, o := range orphans {
		if _, err := tx.Exec(bg, `INSERT INTO entries (account_id, seq, kind, mode, amount, balance_after, available_after, request_id, at)
			VALUES ($1, 1, 'grant', 'live', 1, 1, 1, '', 0)`, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		`UPDATE accounts SET balance = balance + 7 WHERE id = '` + ids[1] + `'`,
		`UPDATE entries SET available_after = 99 WHERE account_id = '` + ids[3] + `' AND seq = 1`,
		`UPDATE accounts SET held = 0 WHERE id = '` + ids[4] + `'`,
		`UPDATE accounts SET next_seq = next_seq + 3 WHERE id = '` + ids[6] + `'`,
	} {
		if _, err := tx.Exec(bg, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(bg); err != nil {
		t.Fatal(err)
	}

	var want ledger.VerifyReport
	for _, batch := range []int{1000, 1, 2, 3, 7} {
		setVerifyBatch(t, batch)
		var calls [][2]int64
		rep, err := s.VerifyProgress(bg, func(done, total int64) { calls = append(calls, [2]int64{done, total}) })
		if err != nil {
			t.Fatal(err)
		}
		if batch == 1000 {
			want = rep
			found := map[string][]string{}
			for _, p := range rep.Problems {
				found[p.AccountID] = append(found[p.AccountID], p.Kind)
			}
			for acct, kinds := range map[string][]string{
				orphans[0]: {"orphan_entries"}, orphans[1]: {"orphan_entries"}, orphans[2]: {"orphan_entries"},
				ids[1]: {"balance_mismatch"}, ids[3]: {"entry_mismatch"}, ids[4]: {"open_hold_mismatch"}, ids[6]: {"seq_gap"},
			} {
				if !reflect.DeepEqual(found[acct], kinds) {
					t.Errorf("problems of %s: %v, want %v", acct, found[acct], kinds)
				}
			}
			if rep.OK || rep.Accounts != 7 || rep.Entries != 7*2+3 || len(found) != 7 {
				t.Errorf("report: ok %v, %d accounts, %d entries, %d accounts with problems: %+v",
					rep.OK, rep.Accounts, rep.Entries, len(found), rep.Problems)
			}
		} else if !reflect.DeepEqual(rep, want) {
			t.Errorf("batches of %d: %+v\nwant (one batch) %+v", batch, rep, want)
		}
		if len(calls) < 2 || calls[0] != [2]int64{0, 7} || calls[len(calls)-1] != [2]int64{7, 7} ||
			!slices.IsSortedFunc(calls, func(a, b [2]int64) int { return int(a[0] - b[0]) }) {
			t.Errorf("batches of %d: progress %v, want 0 to 7 of 7", batch, calls)
		}
	}
}

// TestPostgresVerifyMemory: what Verify keeps is one batch of accounts, not every account's
// figures: verifying tens of thousands of accounts in one batch (as Verify once did for all of
// them) takes several times the heap that batches of verifyBatch take. The heap is sampled,
// after a collection, while it runs; on a busy machine a sample also holds what the collection
// running beside Verify could not free yet, so the bounds leave room for it: the batches stay
// under 12 MiB, and one batch of every account takes at least twice what the batches take.
func TestPostgresVerifyMemory(t *testing.T) {
	s := openPostgres(t, pgtest.NewDatabase(t), pgQuiet)
	const n = 60_000
	if _, err := s.pool.Exec(bg, `INSERT INTO accounts (id, email, status, created)
		SELECT 'acct_' || lpad(i::text, 20, '0'), 'mem' || i || '@example.com', 'active', 0 FROM generate_series(1, $1) i`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Verify(bg); err != nil { // its statements prepared, the pool's connections open
		t.Fatal(err)
	}
	grew := func() int64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		before := ms.HeapAlloc
		var peak atomic.Uint64
		done := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				peak.Store(max(peak.Load(), ms.HeapAlloc))
				select {
				case <-done:
					return
				default:
				}
			}
		}()
		r, err := s.Verify(bg)
		close(done)
		<-sampled
		if err != nil || !r.OK || r.Accounts != n {
			t.Fatalf("verify: %v, ok %v, %d accounts: %v", err, r.OK, r.Accounts, r.Problems)
		}
		return int64(peak.Load()) - int64(before)
	}
	batched := grew()
	setVerifyBatch(t, n)
	whole := grew()
	t.Logf("the heap grew by %.1f MiB verifying %d accounts in batches of 1000, by %.1f MiB in one batch",
		float64(batched)/(1<<20), n, float64(whole)/(1<<20))
	if batched > 12<<20 || batched*2 > whole {
		t.Fatalf("the heap grew by %d KiB in batches, %d KiB in one: Verify keeps more than a batch", batched>>10, whole>>10)
	}
}
