package pgledger

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// PostgreSQL-only tests: what several instances sharing one database must get right. Each
// instance is a *Postgres of its own (its own pool and committer) on the same database.

// twoInstances opens two stores on one fresh database.
func twoInstances(t *testing.T, o PostgresOptions) (*Postgres, *Postgres) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	return openPostgres(t, url, o), openPostgres(t, url, o)
}

// TestPostgresInstancesRaceHolds: two instances race 2,000 holds against 1,000 credits; exactly
// 1,000 succeed, no result ever shows a negative available figure, and the ledger verifies.
func TestPostgresInstancesRaceHolds(t *testing.T) {
	const attempts, credits = 2000, 1000
	a, b := twoInstances(t, pgQuiet)
	acct := ledgertest.MustAccount(t, a, "race@example.com").ID
	ledgertest.MustGrant(t, b, acct, ledger.Live, credits)
	var ok, refused, negative atomic.Int64
	var wg sync.WaitGroup
	for i := range attempts {
		s := []*Postgres{a, b}[i%2]
		wg.Go(func() {
			r, err := s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: fmt.Sprint("r", i)})
			switch {
			case errors.Is(err, ledger.ErrInsufficientCredits):
				refused.Add(1)
			case err != nil:
				t.Error(err)
			default:
				ok.Add(1)
				if r.Available < 0 {
					negative.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != credits || refused.Load() != attempts-credits || negative.Load() != 0 {
		t.Fatalf("%d holds, %d refused, %d negative; want %d, %d, 0", ok.Load(), refused.Load(), negative.Load(), credits, attempts-credits)
	}
	if bal := ledgertest.MustBalance(t, b, acct); bal.Balance != credits || bal.Available != 0 {
		t.Fatalf("balance after the race: %+v", bal)
	}
	ledgertest.VerifyClean(t, a)
}

// TestPostgresInstancesHoldOnce: each request id is held on both instances at the same moment
// (a client's retry that the load balancer sent to the other instance); it is held once: one
// Hold takes the credit, the other reports the same open hold with Repeated set, and so do
// both instances' settles.
func TestPostgresInstancesHoldOnce(t *testing.T) {
	const requests = 300
	a, b := twoInstances(t, pgQuiet)
	acct := ledgertest.MustAccount(t, a, "once@example.com").ID
	ledgertest.MustGrant(t, b, acct, ledger.Live, requests*2)
	var taken, repeated atomic.Int64
	var wg sync.WaitGroup
	for i := range requests {
		rid := fmt.Sprint("r", i)
		start := make(chan struct{})
		for _, s := range []*Postgres{a, b} {
			wg.Go(func() {
				<-start
				r, err := s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: rid})
				switch {
				case err != nil:
					t.Errorf("hold %s: %v", rid, err)
				case r.State != ledger.HoldOpen:
					t.Errorf("hold %s: %+v", rid, r)
				case r.Repeated:
					repeated.Add(1)
				default:
					taken.Add(1)
				}
			})
		}
		close(start)
	}
	wg.Wait()
	if taken.Load() != requests || repeated.Load() != requests {
		t.Fatalf("%d holds taken, %d repeated; want %d and %d", taken.Load(), repeated.Load(), requests, requests)
	}
	if bal := ledgertest.MustBalance(t, a, acct); bal.Balance != requests*2 || bal.Available != requests {
		t.Fatalf("balance after holding each request id twice: %+v", bal)
	}
	var settled atomic.Int64
	for i := range requests {
		rid := fmt.Sprint("r", i)
		for _, s := range []*Postgres{a, b} {
			wg.Go(func() {
				r, err := s.Settle(bg, acct, rid)
				if err != nil || r.State != ledger.HoldSettled {
					t.Errorf("settle %s: %+v %v", rid, r, err)
				} else if !r.Repeated {
					settled.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if bal := ledgertest.MustBalance(t, b, acct); settled.Load() != requests || bal.Balance != requests || bal.Available != requests {
		t.Fatalf("%d settles charged, balance %+v; want %d charged and %d left", settled.Load(), bal, requests, requests)
	}
	ledgertest.VerifyClean(t, a)
}

// TestPostgresSweepNeverVoidsASettlingHold: holds that expired are settled on one instance, by
// eight callers each going through its share, while the other instance sweeps in a loop; five
// rounds. Every hold is resolved exactly once, by whichever came first: a settle that lost
// reports the sweep's void (Repeated), a sweep never voids a hold that was settled, and the
// balance falls by exactly the settles that won.
func TestPostgresSweepNeverVoidsASettlingHold(t *testing.T) {
	t0 := time.Date(2030, 4, 1, 0, 0, 0, 0, time.UTC)
	setNow(t, &t0)
	const accounts, holds, rounds, callers = 4, 200, 5, 8
	settler, sweeper := twoInstances(t, pgQuiet)
	ids := make([]string, accounts)
	for i := range ids {
		ids[i] = ledgertest.MustAccount(t, settler, fmt.Sprintf("s%d@example.com", i)).ID
		ledgertest.MustGrant(t, settler, ids[i], ledger.Live, holds*rounds)
	}
	var settled, lostToSweep, swept atomic.Int64
	for round := range rounds {
		rid := func(i int) string { return fmt.Sprintf("h%d-%d", round, i) }
		for i := range holds {
			ledgertest.MustHold(t, settler, ids[i%accounts], ledger.Live, rid(i))
		}
		t0 = t0.Add(ledger.DefaultHoldTTL) // every hold of the round is due
		stop := make(chan struct{})
		var sweeping sync.WaitGroup
		sweeping.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				n, err := sweeper.sweep(bg)
				if err != nil {
					t.Error(err)
					return
				}
				swept.Add(int64(n))
			}
		})
		var settlers sync.WaitGroup
		for c := range callers {
			settlers.Go(func() {
				for i := c; i < holds; i += callers {
					r, err := settler.Settle(bg, ids[i%accounts], rid(i))
					switch {
					case err != nil:
						t.Error(err)
					case !r.Repeated && r.State == ledger.HoldSettled:
						settled.Add(1)
					case r.Repeated && r.State == ledger.HoldVoided:
						lostToSweep.Add(1)
					default:
						t.Errorf("settle of %s: %+v", rid(i), r)
					}
				}
			})
		}
		settlers.Wait()
		close(stop)
		sweeping.Wait()
	}
	if n, err := sweeper.sweep(bg); err != nil || n != 0 {
		t.Fatalf("a last sweep voided %d holds (%v)", n, err)
	}
	if settled.Load()+lostToSweep.Load() != holds*rounds || swept.Load() != lostToSweep.Load() {
		t.Fatalf("%d settled, %d lost to the sweep, %d swept; want %d in all and swept = lost",
			settled.Load(), lostToSweep.Load(), swept.Load(), holds*rounds)
	}
	var total int64
	for _, id := range ids {
		total += ledgertest.MustBalance(t, sweeper, id).Balance
	}
	if want := accounts*holds*rounds - settled.Load(); total != want {
		t.Fatalf("balances add up to %d, want %d", total, want)
	}
	t.Logf("%d settled, %d voided by the sweep", settled.Load(), swept.Load())
	ledgertest.VerifyClean(t, settler)
}

// TestPostgresConcurrentWebhooks: a payment event delivered many times at once to both
// instances credits once.
func TestPostgresConcurrentWebhooks(t *testing.T) {
	a, b := twoInstances(t, pgQuiet)
	acct := ledgertest.MustAccount(t, a, "buyer@example.com").ID
	var credited atomic.Int64
	var first sync.Map
	var wg sync.WaitGroup
	for i := range 32 {
		s := []*Postgres{a, b}[i%2]
		wg.Go(func() {
			r, err := s.Grant(bg, ledger.GrantRequest{AccountID: acct, Mode: ledger.Live, Kind: ledger.KindPurchase, Credits: 10,
				Reference: "cs_live_1", AmountCents: 900, Currency: "EUR"})
			if err != nil {
				t.Error(err)
				return
			}
			if !r.Repeated {
				credited.Add(1)
			}
			first.Store(r.Entry.Seq, true)
		})
	}
	wg.Wait()
	n := 0
	first.Range(func(any, any) bool { n++; return true })
	if credited.Load() != 1 || n != 1 {
		t.Fatalf("%d deliveries credited, %d different entries reported; want 1 and 1", credited.Load(), n)
	}
	if bal := ledgertest.MustBalance(t, b, acct); bal.Balance != 10 {
		t.Fatalf("balance %+v, want 10", bal)
	}
	if ps, err := b.Purchases(bg, acct, 0); err != nil || len(ps) != 1 {
		t.Fatalf("purchases %+v %v", ps, err)
	}
	ledgertest.VerifyClean(t, a)
}

// TestPostgresRevocationSeenByOtherInstance: a key revoked, or an account disabled, through one
// instance is refused by the other on its next lookup.
func TestPostgresRevocationSeenByOtherInstance(t *testing.T) {
	a, b := twoInstances(t, pgQuiet)
	acct := ledgertest.MustAccount(t, a, "keys@example.com").ID
	full, k, err := a.CreateKey(bg, acct, ledger.Live, "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, got, err := b.LookupKey(bg, full); err != nil || got.Status != ledger.StatusActive {
		t.Fatalf("lookup on the other instance: %+v %v", got, err)
	}
	// LookupKeyBalance, the generate handler's lookup, sees the same, and the other instance's
	// grants and holds.
	if _, got, bal, err := b.LookupKeyBalance(bg, full); err != nil || got.Status != ledger.StatusActive || bal.Available != 0 {
		t.Fatalf("lookup with balance on the other instance: %+v %+v %v", got, bal, err)
	}
	ledgertest.MustGrant(t, a, acct, ledger.Live, 2)
	ledgertest.MustHold(t, a, acct, ledger.Live, "r1")
	if _, _, bal, err := b.LookupKeyBalance(bg, full); err != nil || bal.Balance != 2 || bal.Available != 1 {
		t.Fatalf("the other instance does not see the grant and the hold: %+v %v", bal, err)
	}
	if _, err := a.SetAccountStatus(bg, acct, ledger.StatusDisabled); err != nil {
		t.Fatal(err)
	}
	if _, got, err := b.LookupKey(bg, full); err != nil || got.Status != ledger.StatusDisabled {
		t.Fatalf("the other instance does not see the account disabled: %+v %v", got, err)
	}
	if _, got, _, err := b.LookupKeyBalance(bg, full); err != nil || got.Status != ledger.StatusDisabled {
		t.Fatalf("the other instance's LookupKeyBalance does not see the account disabled: %+v %v", got, err)
	}
	if _, err := a.RevokeKey(bg, acct, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.LookupKey(bg, full); err != ledger.ErrInvalidKey {
		t.Fatalf("the other instance still accepts a revoked key: %v", err)
	}
	if _, _, _, err := b.LookupKeyBalance(bg, full); err != ledger.ErrInvalidKey {
		t.Fatalf("the other instance's LookupKeyBalance still accepts a revoked key: %v", err)
	}
	// Last-use times (of holds) noted by both instances reach the database, the later one wins.
	acct = ledgertest.MustAccount(t, a, "last-use@example.com").ID
	_, k2, err := b.CreateKey(bg, acct, ledger.Test, "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	ledgertest.MustGrant(t, a, acct, ledger.Test, 2)
	t0 := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	setNow(t, &t0)
	if _, err := b.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Test, RequestID: "lu-b", KeyID: k2.ID}); err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(-time.Hour)
	if _, err := a.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Test, RequestID: "lu-a", KeyID: k2.ID}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Postgres{b, a} {
		if err := s.flushLastUsed(); err != nil {
			t.Fatal(err)
		}
	}
	t0 = t0.Add(2 * time.Hour)
	keys, err := openPostgres(t, pgURL(t, a), pgQuiet).ListKeys(bg, acct)
	if err != nil || len(keys) != 1 || keys[0].ID != k2.ID || !keys[0].LastUsed.Equal(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("keys seen by a third instance: %+v %v", keys, err)
	}
}

// pgURL is the database URL a store was opened on.
func pgURL(t *testing.T, s *Postgres) string {
	t.Helper()
	return s.pool.Config().ConnString()
}

// TestPostgresConcurrentMigrations: instances that open a new database at the same time all
// open it; one applies the schema, the others wait for it on the advisory lock.
func TestPostgresConcurrentMigrations(t *testing.T) {
	url := pgtest.NewDatabase(t)
	const n = 4
	stores := make([]*Postgres, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := OpenPostgres(bg, url, pgQuiet)
			if err != nil {
				t.Error(err)
				return
			}
			stores[i] = s
		})
	}
	wg.Wait()
	for _, s := range stores {
		if s != nil {
			t.Cleanup(func() { s.Close() })
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	acct := ledgertest.MustAccount(t, stores[0], "m@example.com").ID
	ledgertest.MustGrant(t, stores[n-1], acct, ledger.Live, 1)
	// Each migration file recorded once, however many instances raced to apply it.
	files, err := fs.Glob(pgMigrations, "migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("migration files: %v %v", files, err)
	}
	var applied int
	if err := stores[1].pool.QueryRow(bg, `SELECT count(*) FROM `+pgVersionTable+` WHERE version_id > 0`).Scan(&applied); err != nil || applied != len(files) {
		t.Fatalf("%d migrations recorded (%v), want %d", applied, err, len(files))
	}
}

// TestPostgresBatchIsolation: a batch is one transaction (all or nothing), and a call that fails
// in the committer's batch fails alone: the others in its batch are carried out once.
func TestPostgresBatchIsolation(t *testing.T) {
	s := openPostgres(t, pgtest.NewDatabase(t), pgQuiet)
	acct := ledgertest.MustAccount(t, s, "iso@example.com").ID
	ledgertest.MustGrant(t, s, acct, ledger.Live, 10)
	ts := now().UnixNano()
	hold := func(rid string) *pgCall {
		return &pgCall{acct: acct, hold: &pgHoldOp{op: "hold", rid: rid, mode: "live", at: ts, expires: ts + int64(time.Hour)}, done: make(chan struct{})}
	}

	// A pipeline whose second statement fails commits nothing.
	b := &pgx.Batch{}
	sql, args := pgHoldsCall([]*pgCall{hold("in-failed-batch")})
	b.Queue(sql, args...)
	b.Queue(`SELECT 1 / 0`)
	if err := s.pool.SendBatch(bg, b).Close(); err == nil {
		t.Fatal("a batch with a division by zero succeeded")
	}
	if bal := ledgertest.MustBalance(t, s, acct); bal.Available != 10 {
		t.Fatalf("the failed batch's hold was kept: %+v", bal)
	}

	// The committer runs the calls of a failed batch again one by one.
	ops := []*pgCall{
		hold("a"),
		{acct: acct, sql: `SELECT 1 / 0`, scan: func(r pgx.Row) error { var n int; return r.Scan(&n) }, done: make(chan struct{})},
		hold("b"),
	}
	s.c.commit(ops)
	if ops[0].err != nil || ops[2].err != nil || ops[1].err == nil || ops[0].hold.out.outcome != "ok" || ops[2].hold.out.outcome != "ok" {
		t.Fatalf("errors %v / %v / %v, outcomes %+v %+v", ops[0].err, ops[1].err, ops[2].err, ops[0].hold.out, ops[2].hold.out)
	}
	if bal := ledgertest.MustBalance(t, s, acct); bal.Available != 8 {
		t.Fatalf("after the retried batch: %+v, want 8 available", bal)
	}
	// A string PostgreSQL cannot store is refused before it reaches a batch.
	_, err := s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: "nul\x00"})
	ledgertest.WantErr(t, err, ledger.ErrInvalidArgument)
	ledgertest.VerifyClean(t, s)
}

// TestPostgresOpenLeavesOpenHolds: unlike Badger, opening a store does not void the holds it
// finds (their instance may be alive); the TTL does.
func TestPostgresOpenLeavesOpenHolds(t *testing.T) {
	url := pgtest.NewDatabase(t)
	a := openPostgres(t, url, pgQuiet)
	acct := ledgertest.MustAccount(t, a, "open@example.com").ID
	ledgertest.MustGrant(t, a, acct, ledger.Live, 1)
	ledgertest.MustHold(t, a, acct, ledger.Live, "in-flight")
	b := openPostgres(t, url, pgQuiet)
	if n, err := b.sweep(bg); err != nil || n != 0 {
		t.Fatalf("a sweep before the TTL voided %d (%v)", n, err)
	}
	if r, err := a.Settle(bg, acct, "in-flight"); err != nil || r.Repeated || r.State != ledger.HoldSettled {
		t.Fatalf("settle after another instance opened: %+v %v", r, err)
	}
}

// unavailableWithin fails the test unless f returns ErrUnavailable within limit.
func unavailableWithin(t *testing.T, what string, limit time.Duration, f func() error) {
	t.Helper()
	start := time.Now()
	err := f()
	if el := time.Since(start); !errors.Is(err, ledger.ErrUnavailable) || el > limit {
		t.Fatalf("%s: %v after %v; want ErrUnavailable within %v", what, err, el, limit)
	}
}
