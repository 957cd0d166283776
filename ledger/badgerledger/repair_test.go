package badgerledger

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// nextLogPath returns the path of the next .ext file Badger would create in dir: the one a
// process killed while creating it leaves behind empty.
func nextLogPath(t *testing.T, dir, ext string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var fids []int
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ext); ok {
			n, err := strconv.Atoi(id)
			if err != nil {
				t.Fatal(err)
			}
			fids = append(fids, n)
		}
	}
	sort.Ints(fids)
	next := 1
	if len(fids) > 0 {
		next = fids[len(fids)-1] + 1
	}
	width := 6 // badger's vlog.fpath
	if ext == ".mem" {
		width = 5 // badger's db.mtFilePath
	}
	return filepath.Join(dir, fmt.Sprintf("%0*d%s", width, next, ext))
}

// TestOpenAfterCrashDuringLogCreation puts the ledger directory in the state a SIGKILL leaves
// when it lands between Badger creating a log file and sizing it (TestCrash found this): an
// empty .vlog or .mem file. Badger alone refuses to open that directory; Open must open it with
// every acknowledged credit in place.
func TestOpenAfterCrashDuringLogCreation(t *testing.T) {
	for _, ext := range []string{".vlog", ".mem"} {
		t.Run(ext, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, quiet)
			if err != nil {
				t.Fatal(err)
			}
			a := ledgertest.MustAccount(t, s, "empty-log@example.com")
			ledgertest.MustGrant(t, s, a.ID, ledger.Live, 7)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			empty := nextLogPath(t, dir, ext)
			if err := os.WriteFile(empty, nil, 0o644); err != nil {
				t.Fatal(err)
			}

			// The upstream bug this works around: if Badger ever opens this directory by
			// itself, the workaround can go (dgraph-io/badger#2207).
			copyDir := t.TempDir()
			copyFiles(t, dir, copyDir)
			o, _ := quiet.withDefaults()
			if db, err := badger.Open(badgerOptions(copyDir, o)); err == nil {
				db.Close()
				t.Errorf("badger.Open now opens a directory with an empty %s file; removeEmptyLogs can go", ext)
			} else if !strings.Contains(err.Error(), "Create a new file") {
				t.Errorf("badger.Open failed differently than dgraph-io/badger#2207: %v", err)
			}

			s, err = Open(dir, quiet)
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			if b := ledgertest.MustBalance(t, s, a.ID); b.Balance != 7 || b.Available != 7 {
				t.Fatalf("balance after reopen = %+v, want 7", b)
			}
			ledgertest.MustGrant(t, s, a.ID, ledger.Live, 1)
			if r, err := s.Verify(bg); err != nil || !r.OK {
				t.Fatalf("verify: %+v %v", r.Problems, err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openDir(t, dir, quiet)
			if b := ledgertest.MustBalance(t, s, a.ID); b.Balance != 8 {
				t.Fatalf("balance after a second reopen = %+v, want 8", b)
			}
		})
	}
}

// TestRemoveEmptyLogsRespectsTheLock: while the ledger is open, an empty log file may be one the
// owner has just created, so nothing may be removed from its directory.
func TestRemoveEmptyLogsRespectsTheLock(t *testing.T) {
	dir := t.TempDir()
	openDir(t, dir, quiet)
	empty := nextLogPath(t, dir, ".vlog")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(empty) })
	if err := removeEmptyLogs(dir, zap.NewNop(), false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(empty); err != nil {
		t.Fatalf("removeEmptyLogs removed a file from a directory another opener holds: %v", err)
	}
	if _, err := Open(dir, quiet); err == nil || !strings.Contains(err.Error(), "another process is using this ledger") {
		t.Fatalf("second Open of a held directory: %v, want the lock error", err)
	}
	// The store holds the very lock Badger takes: Badger itself (a tool, another program) cannot
	// Open the directory either.
	if db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil)); err == nil || !strings.Contains(err.Error(), "Another process is using this Badger database") {
		if db != nil {
			db.Close()
		}
		t.Fatalf("Badger's own Open of a held directory: %v, want its lock error", err)
	}
}

func copyFiles(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() { // the kept generations' directory: not Badger's files
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
