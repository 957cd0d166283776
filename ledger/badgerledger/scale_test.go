package badgerledger

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/pgledger"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// A large ledger: what an operator of a million accounts pays for each operation, against an
// empty ledger on the same disk. The ledger is built once by BenchmarkLargeLedgerBuild
// (gen_test.go's generator) and measured, in a fresh process, by BenchmarkLargeLedger:
//
//	TEXTGEN_LARGE_LEDGER=/data/large TEXTGEN_LARGE_LEDGER_SCALE=0.1 \
//	  go test ./ledger -run '^$' -bench LargeLedgerBuild -benchtime 1x -timeout 2h
//	TEXTGEN_LARGE_LEDGER=/data/large go test ./ledger -run '^$' -bench 'LargeLedger$' -benchtime 1x -timeout 2h
//
// Its lines start with "large:" (TEXTGEN_BENCH_PROFILE=dir: a heap profile after the open).
// TEXTGEN_LARGE_LEDGER_PG=1 also copies it into a PostgreSQL server of its own (ledger migrate)
// and measures the same there (=only: the open, the generate path and PostgreSQL alone);
// TEXTGEN_LARGE_LEDGER_OPEN_ONLY=1 stops after the open and the generate path. docs/BENCHMARKS.md, "A large ledger", has the figures.

// TestLedgerGen: the generator writes a ledger the engine opens and Verify finds whole, with the
// counts asked for, so that what BenchmarkLargeLedger measures is a ledger the engine could have
// written.
func TestLedgerGen(t *testing.T) {
	dir := t.TempDir()
	spec := genSpec{Accounts: 300, Keys: 600, Entries: 30_000, Big: 2, BigEntries: 5_001,
		Now: time.Now().UTC(), Span: 30 * 24 * time.Hour, Seed: 7}
	res, err := genLedger(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Accounts != 300 || res.Keys != 600 || len(res.BigAccounts) != 2 {
		t.Fatalf("generated %+v", res)
	}
	s := openDir(t, dir, quiet)
	rep, err := s.Verify(bg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Accounts != 300 || rep.Entries != res.Entries {
		t.Fatalf("verify: ok %v, %d accounts, %d entries (generated %d): %v", rep.OK, rep.Accounts, rep.Entries, res.Entries, rep.Problems)
	}
	// A big account's history is whole and newest first.
	big := res.BigAccounts[0]
	es, _, err := s.History(bg, big, ledger.Page{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 3 || es[0].Seq != 5_001 || es[2].Seq != 4_999 {
		t.Fatalf("history of %s: %+v", big, es)
	}
	// Its keys: one live, one test, both loaded.
	ks, err := s.ListKeys(bg, big)
	if err != nil || len(ks) != 2 {
		t.Fatalf("keys of %s: %v, %v", big, ks, err)
	}
	// The engine works on it: a new key, a hold and its settle, and the ledger stays whole.
	full, _, err := s.CreateKey(bg, res.Small, ledger.Live, "new", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	k, _, err := s.LookupKey(bg, full)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := s.Balance(bg, res.Small)
	if _, err := s.Reserve(bg, ledger.HoldRequest{AccountID: res.Small, Mode: ledger.Live, RequestID: "req_gen_test", KeyID: k.ID, Tool: "summarize"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(bg, res.Small, "req_gen_test"); err != nil {
		t.Fatal(err)
	}
	after, _ := s.Balance(bg, res.Small)
	if after.Balance != before.Balance-1 {
		t.Fatalf("balance %d after a settle, was %d", after.Balance, before.Balance)
	}
	if rep, err := s.Verify(bg); err != nil || !rep.OK {
		t.Fatalf("verify after a generation: %v %v", err, rep.Problems)
	}
}

// largeDir is the directory of the large ledger, or skips the benchmark.
func largeDir(b *testing.B) string {
	dir := os.Getenv("TEXTGEN_LARGE_LEDGER")
	if dir == "" {
		b.Skip("TEXTGEN_LARGE_LEDGER names the directory of the large ledger (see scale_test.go)")
	}
	return dir
}

// BenchmarkLargeLedgerBuild generates the large ledger into $TEXTGEN_LARGE_LEDGER/badger
// (TEXTGEN_LARGE_LEDGER_SCALE: 1 = a million accounts, the default 0.1).
func BenchmarkLargeLedgerBuild(b *testing.B) {
	dir := filepath.Join(largeDir(b), "badger")
	f := 0.1
	if v := os.Getenv("TEXTGEN_LARGE_LEDGER_SCALE"); v != "" {
		var err error
		if f, err = strconv.ParseFloat(v, 64); err != nil || f <= 0 {
			b.Fatalf("TEXTGEN_LARGE_LEDGER_SCALE=%q", v)
		}
	}
	if empty, err := dirEmpty(dir); err != nil || !empty {
		b.Fatalf("%s must be missing or empty (%v)", dir, err)
	}
	for b.Loop() {
		res, err := genLedger(dir, genScale(f, time.Now().UTC()))
		if err != nil {
			b.Fatal(err)
		}
		size := dirSize(b, dir)
		b.Logf("scale %g: %d accounts, %d keys, %d entries, %d hold records, %d accounts of 100,000 entries; built in %s; %.2f GB on disk",
			f, res.Accounts, res.Keys, res.Entries, res.Holds, len(res.BigAccounts), res.Took.Round(time.Second), float64(size)/1e9)
		b.ReportMetric(res.Took.Seconds(), "build-s")
		b.ReportMetric(float64(size)/1e9, "disk-GB")
	}
}

// BenchmarkLargeLedger measures the large ledger $TEXTGEN_LARGE_LEDGER/badger built by
// BenchmarkLargeLedgerBuild, and an empty ledger beside it, in one run. It leaves the large
// ledger as it found it, but for the generations it runs (settled on a copy of one account's
// credits) and a new key on that account.
func BenchmarkLargeLedger(b *testing.B) {
	root := largeDir(b)
	dir := filepath.Join(root, "badger")
	for b.Loop() {
		measureLarge(b, root, dir)
	}
}

func measureLarge(b *testing.B, root, dir string) {
	ctx := context.Background()
	say("machine: %d CPUs (GOMAXPROCS %d), %s", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	say("ledger on disk: %.2f GB", float64(dirSize(b, dir))/1e9)
	rss0 := rssBytes()
	t0, cpu0 := time.Now(), cpuTime()
	s, err := Open(dir, Options{SweepInterval: -1, GCInterval: -1, LastUsedFlushInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	openTook, openCPU := time.Since(t0), cpuTime()-cpu0
	rss1, anon1 := rssBytes(), anonBytes()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if d := os.Getenv("TEXTGEN_BENCH_PROFILE"); d != "" {
		f, err := os.Create(filepath.Join(d, "large-open.heap"))
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	sc := scanLedger(b, s)
	big, small := sc.big, sc.small
	say("open: %s (CPU %s) for %d accounts and %d keys; RSS %d MB before, %d MB after (anonymous %d MB); Go heap in use %d MB",
		openTook.Round(time.Millisecond), openCPU.Round(time.Millisecond), sc.accounts, sc.keys, rss0>>20, rss1>>20,
		anon1>>20, ms.HeapInuse>>20)
	b.ReportMetric(openTook.Seconds(), "open-s")
	b.ReportMetric(float64(rss1)/(1<<20), "open-RSS-MB")

	// The first use of an account (read from disk into the cache) against its later uses, on
	// accounts spread over the ledger; then the cache full, and what the process holds.
	var cold, warm []time.Duration
	for _, id := range sc.sample {
		t0 := time.Now()
		if _, err := s.Balance(ctx, id); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := s.Balance(ctx, id); err != nil {
			b.Fatal(err)
		}
		cold, warm = append(cold, t1.Sub(t0)), append(warm, time.Since(t1))
	}
	say("first use of an account (read into the cache), %d accounts: p50 %s p99 %s; its next use p50 %s p99 %s",
		len(cold), pct(cold, 50), pct(cold, 99), pct(warm, 50), pct(warm, 99))
	c0 := cpuTime()
	t0 = time.Now()
	for _, id := range sc.all {
		if _, err := s.Balance(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	cs := s.CacheStats()
	say("every account used once (%d): %s (CPU %s); cache %d accounts, %d key digests, %d evictions; RSS %d MB (anonymous %d MB), Go heap in use %d MB",
		len(sc.all), time.Since(t0).Round(time.Millisecond), (cpuTime() - c0).Round(time.Millisecond), cs.Accounts, cs.Keys, cs.Evictions,
		rssBytes()>>20, anonBytes()>>20, ms.HeapInuse>>20)
	sc.all = nil

	// What reads every record of a kind on disk now that nothing is loaded at open.
	var found []ledger.Key
	c0 = cpuTime()
	took := timeIt(func() { found, err = s.FindKeys(ctx, "Zq9x", 50) })
	if err != nil {
		b.Fatal(err)
	}
	say("key search by its last 4 characters: %d found in %s (CPU %s)", len(found), took.Round(time.Millisecond), (cpuTime() - c0).Round(time.Millisecond))
	var low []ledger.LowBalanceChange
	c0 = cpuTime()
	took = timeIt(func() { low, err = s.LowBalanceChanges(ctx, 1000) })
	if err != nil {
		b.Fatal(err)
	}
	say("low-balance changes: %d in %s (CPU %s)", len(low), took.Round(time.Millisecond), (cpuTime() - c0).Round(time.Millisecond))
	var page []ledger.Account
	took = timeIt(func() { page, _, err = s.ListAccounts(ctx, ledger.Page{Limit: 50}) })
	if err != nil || len(page) != 50 {
		b.Fatalf("list accounts: %v (%d)", err, len(page))
	}
	say("account list, first page of 50: %s", took.Round(time.Microsecond))

	// The generate path, large against empty, interleaved.
	empty, err := Open(filepath.Join(root, "empty-badger"), Options{SweepInterval: -1, GCInterval: -1, LastUsedFlushInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	eacct, err := empty.CreateAccount(ctx, fmt.Sprintf("empty%d@example.com", time.Now().UnixNano()))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := empty.Grant(ctx, ledger.GrantRequest{AccountID: eacct.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 1 << 30}); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Grant(ctx, ledger.GrantRequest{AccountID: small, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 100_000}); err != nil {
		b.Fatal(err)
	}
	large := pathTimes{}
	emptyT := pathTimes{}
	runPath(b, s, small, 10, 200, &large, empty, eacct.ID, &emptyT)
	large.log("large ledger")
	emptyT.log("empty ledger")
	say("generate path, large / empty: lookup p50 %.2fx, reserve p50 %.2fx p99 %.2fx, settle p50 %.2fx p99 %.2fx",
		ratio(large.lookup, emptyT.lookup, 50), ratio(large.reserve, emptyT.reserve, 50), ratio(large.reserve, emptyT.reserve, 99),
		ratio(large.settle, emptyT.settle, 50), ratio(large.settle, emptyT.settle, 99))
	empty.Close()

	if os.Getenv("TEXTGEN_LARGE_LEDGER_OPEN_ONLY") != "" {
		s.Close()
		return
	}
	if os.Getenv("TEXTGEN_LARGE_LEDGER_PG") == "only" {
		measurePostgres(b, s, big, small)
		return
	}

	// One big account's history and usage.
	var es []ledger.Entry
	took = timeIt(func() { es, _, err = s.History(ctx, big, ledger.Page{Limit: 50}) })
	if err != nil || len(es) != 50 {
		b.Fatalf("history: %v (%d)", err, len(es))
	}
	say("history of an account of %d entries, first page of 50: %s", sc.bigEntries, took)
	pages := 0
	took = timeIt(func() {
		cur := ""
		for {
			_, next, err := s.History(ctx, big, ledger.Page{Limit: 1000, Cursor: cur})
			if err != nil {
				b.Fatal(err)
			}
			pages++
			if next == "" {
				return
			}
			cur = next
		}
	})
	say("history of that account, all of it in pages of 1000: %d pages in %s", pages, took.Round(time.Millisecond))
	var rows []ledger.UsageRow
	took = timeIt(func() {
		rows, err = s.Usage(ctx, ledger.UsageQuery{AccountID: big, From: time.Now().Add(-30 * 24 * time.Hour)})
	})
	if err != nil {
		b.Fatal(err)
	}
	say("usage of that account, last 30 days: %d rows in %s", len(rows), took.Round(time.Microsecond))
	took = timeIt(func() { rows, err = s.Usage(ctx, ledger.UsageQuery{AccountID: big}) })
	if err != nil {
		b.Fatal(err)
	}
	say("usage of that account, all time: %d rows in %s", len(rows), took.Round(time.Millisecond))

	// Verify and backup: time and the peak of the process's memory while they run.
	// TEXTGEN_LARGE_LEDGER_SKIP_VERIFY=1 leaves verify out (a long step at the full size).
	var peak int64
	if os.Getenv("TEXTGEN_LARGE_LEDGER_SKIP_VERIFY") == "" {
		var rep ledger.VerifyReport
		c0 := cpuTime()
		took, peak = withPeakRSS(func() { rep, err = s.Verify(ctx) })
		if err != nil || !rep.OK {
			b.Fatalf("verify: %v %v", err, rep.Problems)
		}
		say("verify: ok, %d accounts, %d entries in %s (CPU %s); peak anonymous RSS %d MB (%d MB above the open ledger)",
			rep.Accounts, rep.Entries, took.Round(time.Millisecond), (cpuTime() - c0).Round(time.Millisecond), peak>>20, (peak-anon1)>>20)
		b.ReportMetric(took.Seconds(), "verify-s")
	}
	// The backup goes to a counter, not to disk: it is as large as the ledger uncompressed (25 GB
	// at the full size), and what is measured is reading and encoding it.
	w := &countWriter{}
	c0 = cpuTime()
	took, peak = withPeakRSS(func() { err = s.Backup(ctx, w) })
	if err != nil {
		b.Fatal(err)
	}
	say("backup: %.2f GB in %s (CPU %s); peak anonymous RSS %d MB (%d MB above the open ledger)", float64(w.n)/1e9, took.Round(time.Millisecond),
		(cpuTime() - c0).Round(time.Millisecond), peak>>20, (peak-anon1)>>20)
	b.ReportMetric(took.Seconds(), "backup-s")

	if os.Getenv("TEXTGEN_LARGE_LEDGER_PG") != "" {
		measurePostgres(b, s, big, small)
	}
	took = timeIt(func() { err = s.Close() })
	if err != nil {
		b.Fatal(err)
	}
	say("close: %s", took.Round(time.Millisecond))
}

// ledgerScan is what scanLedger finds on disk.
type ledgerScan struct {
	accounts, keys int64
	big, small     string // the account of most entries; one of a few entries
	bigEntries     uint64
	sample         []string // 1,000 accounts spread over the ledger
	all            []string // every account
}

// scanLedger reads the open ledger's balance records and counts its keys, one record at a time.
func scanLedger(b *testing.B, s *Badger) ledgerScan {
	var sc ledgerScan
	err := s.db.View(func(txn *badger.Txn) error {
		var err error
		if sc.keys, err = countKeys(txn, []byte{prefixKey}); err != nil {
			return err
		}
		return iterate(txn, []byte{prefixBalance}, func(k, v []byte) error {
			var rec balanceRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return err
			}
			id := string(k[1:])
			sc.accounts++
			sc.all = append(sc.all, id)
			if rec.NextSeq-1 > sc.bigEntries {
				sc.big, sc.bigEntries = id, rec.NextSeq-1
			}
			if sc.small == "" && rec.NextSeq > 5 && rec.NextSeq < 1000 {
				sc.small = id
			}
			return nil
		})
	})
	if err != nil {
		b.Fatal(err)
	}
	step := max(1, len(sc.all)/1000)
	for i := step / 2; i < len(sc.all); i += step {
		if sc.all[i] != sc.small && sc.all[i] != sc.big {
			sc.sample = append(sc.sample, sc.all[i])
		}
	}
	return sc
}

// measurePostgres copies the open large ledger into a PostgreSQL server of its own (what
// `ledger migrate` does) and measures the same operations there.
func measurePostgres(b *testing.B, s *Badger, big, small string) {
	// As long as ledger migrate allows (caddymodule/operator/cli_migrate.go).
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Hour)
	defer cancel()
	srv, err := pgtest.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	db, err := srv.CreateDatabase(ctx)
	if err != nil {
		b.Fatal(err)
	}
	p, err := pgledger.OpenPostgres(ctx, srv.URL(db), pgledger.PostgresOptions{SweepInterval: -1, LastUsedFlushInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	took, peak := withPeakRSS(func() { err = pgledger.CopyLedger(ctx, s, p, pgledger.CopyOptions{}) })
	if err != nil {
		b.Fatalf("migrate after %s: %v", took.Round(time.Second), err)
	}
	say("migrate to PostgreSQL: %s; peak anonymous RSS of this process %d MB", took.Round(time.Second), peak>>20)
	b.ReportMetric(took.Seconds(), "migrate-s")

	edb, err := srv.CreateDatabase(ctx)
	if err != nil {
		b.Fatal(err)
	}
	e, err := pgledger.OpenPostgres(ctx, srv.URL(edb), pgledger.PostgresOptions{SweepInterval: -1, LastUsedFlushInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	ea, err := e.CreateAccount(ctx, "empty@example.com")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.Grant(ctx, ledger.GrantRequest{AccountID: ea.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 1 << 30}); err != nil {
		b.Fatal(err)
	}
	large, empty := pathTimes{}, pathTimes{}
	runPath(b, p, small, 5, 100, &large, e, ea.ID, &empty)
	large.log("PostgreSQL, large")
	empty.log("PostgreSQL, empty")
	say("PostgreSQL generate path, large / empty: lookup p50 %.2fx, reserve p50 %.2fx p99 %.2fx, settle p50 %.2fx p99 %.2fx",
		ratio(large.lookup, empty.lookup, 50), ratio(large.reserve, empty.reserve, 50), ratio(large.reserve, empty.reserve, 99),
		ratio(large.settle, empty.settle, 50), ratio(large.settle, empty.settle, 99))
	var es []ledger.Entry
	took = timeIt(func() { es, _, err = p.History(ctx, big, ledger.Page{Limit: 50}) })
	if err != nil || len(es) != 50 {
		b.Fatalf("history: %v", err)
	}
	say("PostgreSQL history, first page of 50: %s", took)
	took = timeIt(func() {
		_, err = p.Usage(ctx, ledger.UsageQuery{AccountID: big, From: time.Now().Add(-30 * 24 * time.Hour)})
	})
	if err != nil {
		b.Fatal(err)
	}
	say("PostgreSQL usage, last 30 days: %s", took.Round(time.Microsecond))
	took = timeIt(func() { _, err = p.Usage(ctx, ledger.UsageQuery{AccountID: big}) })
	if err != nil {
		b.Fatal(err)
	}
	say("PostgreSQL usage, all time: %s", took.Round(time.Millisecond))
	var rep ledger.VerifyReport
	took = timeIt(func() { rep, err = p.Verify(ctx) })
	if err != nil || !rep.OK {
		b.Fatalf("PostgreSQL verify: %v %v", err, rep.Problems)
	}
	say("PostgreSQL verify: ok, %d accounts, %d entries in %s", rep.Accounts, rep.Entries, took.Round(time.Millisecond))
}

// say prints one line of the measurements at once: a benchmark's own log keeps 10 lines.
func say(format string, args ...any) { fmt.Printf("large: "+format+"\n", args...) }

// pathTimes are the per-call times of the generate path's ledger calls.
type pathTimes struct{ lookup, reserve, settle []time.Duration }

func (p *pathTimes) log(what string) {
	say("%s: key lookup p50 %s p99 %s; reserve p50 %s p99 %s; settle (durable) p50 %s p99 %s (%d generations)", what,
		pct(p.lookup, 50), pct(p.lookup, 99), pct(p.reserve, 50), pct(p.reserve, 99), pct(p.settle, 50), pct(p.settle, 99), len(p.settle))
}

// runPath runs rounds of n generations' ledger calls (key lookup, Reserve, Settle, one caller)
// on each store in turn, so that both see the same disk and the same neighbours.
func runPath(b *testing.B, s ledger.Store, acct string, rounds, n int, st *pathTimes, e ledger.Store, eacct string, et *pathTimes) {
	ctx := context.Background()
	key := func(s ledger.Store, acct string) string {
		full, _, err := s.CreateKey(ctx, acct, ledger.Live, "bench", time.Time{})
		if err != nil {
			b.Fatal(err)
		}
		return full
	}
	sk, ek := key(s, acct), key(e, eacct)
	var seq atomic.Int64
	run := time.Now().UnixNano() // ids new to the ledger, as the handler's are (NewID)
	one := func(s ledger.Store, acct, full string, t *pathTimes) {
		rid := fmt.Sprintf("req_bench%d_%013d", run, seq.Add(1))
		t0 := time.Now()
		k, _, err := s.LookupKey(ctx, full)
		t1 := time.Now()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Reserve(ctx, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: rid, NewID: true, KeyID: k.ID, Tool: "summarize"}); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := s.Settle(ctx, acct, rid); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		t.lookup = append(t.lookup, t1.Sub(t0))
		t.reserve = append(t.reserve, t2.Sub(t1))
		t.settle = append(t.settle, t3.Sub(t2))
	}
	for range rounds {
		for range n {
			one(s, acct, sk, st)
		}
		for range n {
			one(e, eacct, ek, et)
		}
	}
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)].Round(time.Microsecond / 10)
}

func ratio(a, b []time.Duration, p int) float64 { return float64(pct(a, p)) / float64(pct(b, p)) }

func timeIt(f func()) time.Duration {
	t := time.Now()
	f()
	return time.Since(t)
}

// withPeakRSS runs f and returns how long it took and the highest anonymous RSS (anonBytes)
// sampled meanwhile.
func withPeakRSS(f func()) (time.Duration, int64) {
	var peak atomic.Int64
	peak.Store(anonBytes())
	done := make(chan struct{})
	go func() {
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				if r := anonBytes(); r > peak.Load() {
					peak.Store(r)
				}
			}
		}
	}()
	took := timeIt(f)
	close(done)
	if r := anonBytes(); r > peak.Load() {
		peak.Store(r)
	}
	return took, peak.Load()
}

// countWriter counts what it is given and keeps none of it.
type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// cpuTime is the CPU time (user and system) the process has used (Linux; 0 elsewhere): the
// figure that a machine shared with other work disturbs less than the wall clock.
func cpuTime() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // clock ticks: USER_HZ is 100 on Linux
}

// rssBytes is the process's resident memory (Linux; 0 elsewhere).
func rssBytes() int64 { return statusBytes("VmRSS:") }

// anonBytes is the process's resident anonymous memory: its RSS less the pages of files it maps,
// which Badger's tables are (the kernel takes those back when it needs them).
func anonBytes() int64 { return statusBytes("RssAnon:") }

// statusBytes reads one field of /proc/self/status in bytes (Linux; 0 elsewhere).
func statusBytes(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	for line := range bytes.Lines(b) {
		if v, ok := strings.CutPrefix(string(line), field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func dirSize(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if fi, err := d.Info(); err == nil {
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}
