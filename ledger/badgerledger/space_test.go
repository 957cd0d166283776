//go:build linux

package badgerledger

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/disktest"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// eventually polls cond every 10 ms until it holds, failing after a minute.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDiskFull runs the ledger on a real 40 MB file system that another file fills up. The
// process survives (Badger would die of SIGBUS writing through its memory map); new work is
// refused with ErrDiskFull before anything changes; reads go on; a hold taken before is settled
// once space is back; the store takes work again by itself; nothing is lost.
func TestDiskFull(t *testing.T) {
	disktest.Run(t, 40<<20, func(t *testing.T, dir string) {
		o := quiet
		o.SpaceCheckInterval = 20 * time.Millisecond
		o.Logger = zaptest.NewLogger(t)
		s := openDir(t, filepath.Join(dir, "ledger"), o)
		a := ledgertest.MustAccount(t, s, "full@example.com").ID
		ledgertest.MustGrant(t, s, a, ledger.Live, 10)
		full, _, err := s.CreateKey(bg, a, ledger.Live, "k", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		ledgertest.MustHold(t, s, a, ledger.Live, "before")
		if err := s.Health(bg); err != nil {
			t.Fatalf("health with space: %v", err)
		}

		remove := disktest.Fill(t, dir)
		eventually(t, "the space alarm", func() bool { return errors.Is(s.Health(bg), ledger.ErrDiskFull) })
		before := ledgertest.MustBalance(t, s, a)
		// New work is refused, and changes nothing.
		_, err = s.Reserve(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "during"})
		ledgertest.WantErr(t, err, ledger.ErrUnavailable)
		_, err = s.Grant(bg, ledger.GrantRequest{AccountID: a, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 1, Reference: "during"})
		ledgertest.WantErr(t, err, ledger.ErrDiskFull)
		_, err = s.CreateAccount(bg, "new@example.com")
		ledgertest.WantErr(t, err, ledger.ErrUnavailable)
		_, _, err = s.CreateKey(bg, a, ledger.Live, "k2", time.Time{})
		ledgertest.WantErr(t, err, ledger.ErrUnavailable)
		_, _, err = s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: "k", RequestID: "during"})
		ledgertest.WantErr(t, err, ledger.ErrUnavailable)
		_, _, err = s.RecordUnmatchedPayment(bg, ledger.UnmatchedPayment{Reference: "cs_during", Currency: "eur", Problem: ledger.ProblemUnknownPackage})
		ledgertest.WantErr(t, err, ledger.ErrUnavailable)
		if b := ledgertest.MustBalance(t, s, a); !reflect.DeepEqual(b, before) {
			t.Fatalf("balance changed by refused work: %+v, was %+v", b, before)
		}
		// Reads go on.
		if _, _, err := s.LookupKey(bg, full); err != nil {
			t.Fatalf("key lookup on a full disk: %v", err)
		}
		if _, _, err := s.History(bg, a, ledger.Page{}); err != nil {
			t.Fatalf("history on a full disk: %v", err)
		}
		if r, err := s.Verify(bg); err != nil || !r.OK {
			t.Fatalf("verify on a full disk: %+v %v", r, err)
		}
		if ps, err := s.UnmatchedPayments(bg, false, 0); err != nil || len(ps) != 0 {
			t.Fatalf("unmatched payments on a full disk: %+v %v; want none, the refused one not stored", ps, err)
		}
		// The hold taken before is settled: on a disk this full its commit waits for space.
		settled := make(chan error, 1)
		go func() { _, err := s.Settle(bg, a, "before"); settled <- err }()

		remove()
		eventually(t, "the store to take work again", func() bool { return s.Health(bg) == nil })
		if err := <-settled; err != nil {
			t.Fatalf("settle after space came back: %v", err)
		}
		if _, repeated, err := s.RecordUnmatchedPayment(bg, ledger.UnmatchedPayment{Reference: "cs_during", Currency: "eur",
			Problem: ledger.ProblemUnknownPackage}); err != nil || repeated {
			t.Fatalf("the refused payment recorded after space came back: repeated %v, %v", repeated, err)
		}
		ledgertest.MustHold(t, s, a, ledger.Live, "after")
		if _, err := s.Settle(bg, a, "after"); err != nil {
			t.Fatal(err)
		}
		if b := ledgertest.MustBalance(t, s, a); b.Balance != 8 || b.Available != 8 {
			t.Fatalf("balance %+v, want 8: two settled holds, nothing else", b)
		}
		ledgertest.VerifyClean(t, s)
	})
}

// TestOpenOnFullDisk: a ledger whose disk filled up while it was closed opens (the server
// starts), reads, refuses new work, and voids the previous process's holds once space is back.
func TestOpenOnFullDisk(t *testing.T) {
	disktest.Run(t, 40<<20, func(t *testing.T, dir string) {
		ldir := filepath.Join(dir, "ledger")
		o := quiet
		o.SpaceCheckInterval = 20 * time.Millisecond
		s := openDir(t, ldir, o)
		a := ledgertest.MustAccount(t, s, "reopen@example.com").ID
		ledgertest.MustGrant(t, s, a, ledger.Live, 5)
		ledgertest.MustHold(t, s, a, ledger.Live, "left-open")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		remove := disktest.Fill(t, dir)
		s, err := Open(ldir, o)
		if err != nil {
			t.Fatalf("opening a ledger on a full disk: %v", err)
		}
		defer s.Close()
		if !errors.Is(s.Health(bg), ledger.ErrDiskFull) {
			t.Fatalf("health on a full disk: %v", s.Health(bg))
		}
		if b := ledgertest.MustBalance(t, s, a); b.Balance != 5 || b.Available != 4 {
			t.Fatalf("balance on a full disk %+v, want 5 with the old hold still open", b)
		}
		// Verify reads everything (and waits for what is committed, which writes nothing).
		if r, err := s.Verify(bg); err != nil || r.Accounts != 1 {
			t.Fatalf("verify on a full disk: %+v %v", r, err)
		}
		_, err = s.Reserve(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "new"})
		ledgertest.WantErr(t, err, ledger.ErrDiskFull)

		remove()
		// The balance shows the void as soon as it is applied in memory; its entry is readable
		// once its commit lands. Wait for both.
		eventually(t, "the old hold to be voided once space is back", func() bool {
			if ledgertest.MustBalance(t, s, a).Available != 5 {
				return false
			}
			e := ledgertest.AllHistory(t, s, a)[0]
			return e.Kind == ledger.KindVoid && e.Reason == "restart" && e.RequestID == "left-open"
		})
		ledgertest.MustHold(t, s, a, ledger.Live, "new")
		ledgertest.VerifyClean(t, s)
	})
}

// TestOpenOnFullDiskWithLogToReplay: a ledger left by a process that ended without closing it
// (a crash, or a Close on a full disk) keeps its last commits in Badger's write-ahead log, which
// the next open must replay and truncate. On a disk that filled up meanwhile that cannot be done
// read-only (Badger stops the process; on the full tmpfs its read of the log dies of SIGBUS
// first), so Open refuses with ErrDiskFull, changing nothing, and once space is back it opens
// with every commit the process made.
func TestOpenOnFullDiskWithLogToReplay(t *testing.T) {
	disktest.Run(t, 40<<20, func(t *testing.T, dir string) {
		ldir := filepath.Join(dir, "ledger")
		cmd := exec.Command(os.Args[0], "-test.run=^TestLeaveLogChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "LEDGER_LEAVE_LOG_DIR="+ldir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the child that leaves its log: %v\n%s", err, out)
		}
		if len(logsToReplay(ldir)) == 0 {
			t.Fatal("the child left no write-ahead log to replay: the test tests nothing")
		}
		o := quiet
		o.SpaceCheckInterval = 20 * time.Millisecond
		remove := disktest.Fill(t, dir)
		if s, err := Open(ldir, o); !errors.Is(err, ledger.ErrDiskFull) {
			if err == nil {
				s.Close()
			}
			t.Fatalf("opening a ledger with a log to replay on a full disk: %v, want ErrDiskFull", err)
		}
		remove()
		s := openDir(t, ldir, o)
		a, err := s.GetAccountByEmail(bg, "left@example.com")
		if err != nil {
			t.Fatal(err)
		}
		if b := ledgertest.MustBalance(t, s, a.ID); b.Balance != 6 || b.Available != 6 {
			t.Fatalf("balance after the log was replayed: %+v, want 6 (its hold voided at the restart)", b)
		}
		ledgertest.VerifyClean(t, s)
	})
}

// TestLeaveLogChild is the process TestOpenOnFullDiskWithLogToReplay runs: it writes to a
// ledger and exits without closing it, as a crash would (every commit is synced).
func TestLeaveLogChild(t *testing.T) {
	dir := os.Getenv("LEDGER_LEAVE_LOG_DIR")
	if dir == "" {
		t.Skip("run by TestOpenOnFullDiskWithLogToReplay")
	}
	s, err := Open(dir, quiet)
	if err != nil {
		t.Fatal(err)
	}
	a := ledgertest.MustAccount(t, s, "left@example.com").ID
	ledgertest.MustGrant(t, s, a, ledger.Live, 7)
	ledgertest.MustHold(t, s, a, ledger.Live, "settled")
	if _, err := s.Settle(bg, a, "settled"); err != nil {
		t.Fatal(err)
	}
	ledgertest.MustHold(t, s, a, ledger.Live, "left-open")
	os.Exit(0)
}

// TestCloseOnFullDisk: closing a store whose disk is full (Caddy stopping) neither dies of
// SIGBUS (Badger's Close writes its memtable out through a memory map) nor loses anything:
// every commit was synced, and the next open replays them.
func TestCloseOnFullDisk(t *testing.T) {
	disktest.Run(t, 40<<20, func(t *testing.T, dir string) {
		ldir := filepath.Join(dir, "ledger")
		o := quiet
		o.SpaceCheckInterval = 20 * time.Millisecond
		s, err := Open(ldir, o)
		if err != nil {
			t.Fatal(err)
		}
		a := ledgertest.MustAccount(t, s, "close@example.com").ID
		for i := range 50 {
			ledgertest.MustGrant(t, s, a, ledger.Live, int64(i+1))
		}
		remove := disktest.Fill(t, dir)
		eventually(t, "the space alarm", func() bool { return errors.Is(s.Health(bg), ledger.ErrDiskFull) })
		if err := s.Close(); err != nil {
			t.Fatalf("close on a full disk: %v", err)
		}
		remove()
		s = openDir(t, ldir, o)
		if b := ledgertest.MustBalance(t, s, a); b.Balance != 50*51/2 {
			t.Fatalf("balance after closing on a full disk and reopening: %+v, want %d", b, 50*51/2)
		}
		ledgertest.VerifyClean(t, s)
	})
}

// TestGrantOutcomeUnknownOnFullDisk: a grant that got past the space check just before another
// program filled the disk waits in the committer for space. A caller that stops waiting (an
// operator's command that gave up) is told ErrOutcomeUnknown, not a failure: the grant is still
// queued, and is made once space is back. A retry with the same reference credits nothing more.
func TestGrantOutcomeUnknownOnFullDisk(t *testing.T) {
	disktest.Run(t, 40<<20, func(t *testing.T, dir string) {
		o := quiet
		o.SpaceCheckInterval = time.Hour // only the committer's own check sees the disk fill
		o.Logger = zaptest.NewLogger(t)
		s := openDir(t, filepath.Join(dir, "ledger"), o)
		a := ledgertest.MustAccount(t, s, "grant@example.com").ID
		req := ledger.GrantRequest{AccountID: a, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 10, Reference: "ticket-7"}

		remove := disktest.Fill(t, dir)
		removed := false
		defer func() {
			if !removed {
				remove()
			}
		}()
		ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
		defer cancel()
		got := make(chan error, 1)
		go func() { _, err := s.Grant(ctx, req); got <- err }()
		var err error
		select {
		case err = <-got:
		case <-time.After(time.Minute):
			remove()
			removed = true
			t.Fatalf("the grant waited for space long past its context's end (it then returned %v)", <-got)
		}
		ledgertest.WantErr(t, err, ledger.ErrOutcomeUnknown)
		if errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("an unknown outcome reported as unavailable (nothing written): %v", err)
		}

		remove()
		removed = true
		eventually(t, "the queued grant to be made", func() bool { return ledgertest.MustBalance(t, s, a).Balance == 10 })
		// The background check (an hour apart here) would lower the alarm; check now.
		eventually(t, "the store to take work again", func() bool { s.space.check(); return s.Health(bg) == nil })
		res, err := s.Grant(bg, req)
		if err != nil || !res.Repeated || res.Balance.Balance != 10 {
			t.Fatalf("the retry with the same reference: %+v %v; want repeated, balance 10", res, err)
		}
		ledgertest.VerifyClean(t, s)
	})
}
