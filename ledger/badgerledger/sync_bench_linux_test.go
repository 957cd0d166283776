//go:build linux

package badgerledger

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// BenchmarkSyncCPU compares, in one run, the CPU of the process for one durable write of a
// settle's size (two entries of 300 bytes): a synced Badger commit with the ledger's options
// (what a group commit costs), and the cheapest durable write there is, a pwrite into a file
// zeroed in advance and fdatasync (no memory map, no block allocation, as PostgreSQL's WAL
// segments). The two alternate in rounds, so both see the same machine. The ratio says how much
// a write path of the ledger's own could save a commit, before anything else it would cost.
func BenchmarkSyncCPU(b *testing.B) {
	dir := b.TempDir()
	opts, err := Options{}.withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	db, err := badger.Open(badgerOptions(filepath.Join(dir, "badger"), opts))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	f, err := os.Create(filepath.Join(dir, "journal"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	const segment = 64 << 20
	if _, err := f.Write(make([]byte, segment)); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	val := make([]byte, 300)
	rec := make([]byte, 700)
	var badgerCPU, journalCPU time.Duration
	var n, off int64
	const round = 50
	for b.Loop() {
		c0 := processCPUTime(b)
		for range round {
			n++
			txn := db.NewTransaction(true)
			if err := txn.Set(fmt.Appendf(nil, "e%012d", n), val); err != nil {
				b.Fatal(err)
			}
			if err := txn.Set(fmt.Appendf(nil, "h%012d", n), val); err != nil {
				b.Fatal(err)
			}
			if err := txn.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		c1 := processCPUTime(b)
		for range round {
			if _, err := f.WriteAt(rec, off); err != nil {
				b.Fatal(err)
			}
			if off += int64(len(rec)); off+int64(len(rec)) > segment {
				off = 0
			}
			if err := syscall.Fdatasync(int(f.Fd())); err != nil {
				b.Fatal(err)
			}
		}
		c2 := processCPUTime(b)
		badgerCPU += c1 - c0
		journalCPU += c2 - c1
	}
	ops := float64(b.N * round)
	b.ReportMetric(float64(badgerCPU.Microseconds())/ops, "badger-commit-cpu-us")
	b.ReportMetric(float64(journalCPU.Microseconds())/ops, "prezeroed-fdatasync-cpu-us")
	b.ReportMetric(float64(journalCPU)/float64(badgerCPU), "prezeroed/badger")
}

// processCPUTime is the CPU time the process has used, user and system, all its threads.
func processCPUTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
