package operator

import (
	"os"
	"path/filepath"
	"strings"
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

// TestBackupGuardsEachRefuse: each of backup's two guards refuses an existing file on its own
// (checkBackupTarget before the download, placeBackup for a file that appeared during it), so
// that neither hides the other being broken; with force, the download replaces the file.
func TestBackupGuardsEachRefuse(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "ledger.backup")
	if err := os.WriteFile(out, []byte("an older backup"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkBackupTarget(out, false); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("checkBackupTarget without force: %v, want a refusal that names --force", err)
	}
	if err := checkBackupTarget(out, true); err != nil {
		t.Errorf("checkBackupTarget with force: %v", err)
	}
	if err := checkBackupTarget(filepath.Join(dir, "new.backup"), false); err != nil {
		t.Errorf("checkBackupTarget of a new file: %v", err)
	}

	tmp := filepath.Join(dir, ".ledger.backup.part-1")
	if err := os.WriteFile(tmp, []byte("the new backup"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := placeBackup(tmp, out, false); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("placeBackup without force: %v, want a refusal that names --force", err)
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "an older backup" {
		t.Fatalf("placeBackup without force touched the existing file: %q %v", b, err)
	}
	if err := placeBackup(tmp, out, true); err != nil {
		t.Fatalf("placeBackup with force: %v", err)
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "the new backup" {
		t.Errorf("placeBackup with force: the file has %q %v", b, err)
	}
}
