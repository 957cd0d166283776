package operator

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
)

// TestCLIBackupNoOverwrite: backup never replaces a file unless --force is given.
func TestCLIBackupNoOverwrite(t *testing.T) {
	work := t.TempDir()
	s := startCLIServer(t, filepath.Join(work, "ledger"))
	s.JSON("account", "create", "--email", "keep@example.com")
	out := filepath.Join(work, "ledger.backup")
	if err := os.WriteFile(out, []byte("an older backup"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"backup", "--output", out}, {"backup", "--output", out, "--json"}} {
		caddyproc.MustFail(t, s.Textgen(args...), 1, out, "exists", "--force")
		if b, err := os.ReadFile(out); err != nil || string(b) != "an older backup" {
			t.Fatalf("a refused backup touched the existing file: %q %v", b, err)
		}
	}
	oneErrorLine(t, s.Textgen("backup", "--output", out), 1, "--force")
	caddyproc.MustFail(t, s.Textgen("backup", "--output", work, "--force"), 1, "directory")

	bk := s.JSON("backup", "--output", out, "--force")
	if fi, err := os.Stat(out); err != nil || fi.Size() != caddyproc.Num(t, bk, "bytes") {
		t.Fatalf("backup --force did not replace the file: %v %v, %v", fi, err, bk)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(work, ".ledger.backup.part-*")); len(leftovers) != 0 {
		t.Errorf("backup left temporary files: %v", leftovers)
	}
	// a new file needs no --force
	fresh := filepath.Join(work, "fresh.backup")
	if bk := s.JSON("backup", "--output", fresh); caddyproc.Str(t, bk, "output") != fresh {
		t.Errorf("backup to a new file: %v", bk)
	}
}
