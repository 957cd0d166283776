package operator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/caddymodule/internal/progress"
)

// progressLabel starts every line the long commands write on stderr without a terminal.
var progressLabel = regexp.MustCompile(`^(verifying|downloading the backup|restoring|opening the Badger ledger|copying|` +
	`verifying the Badger ledger|verifying the PostgreSQL ledger): `)

// wantProgress requires stderr to hold nothing but progress lines, and a line matching each of
// want.
func wantProgress(t *testing.T, res caddyproc.Result, want ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(res.Stderr, "\n"), "\n")
	for _, l := range lines {
		if !progressLabel.MatchString(l) {
			t.Errorf("stderr has %q, which is no progress line\n%s", l, res)
		}
	}
	for _, w := range want {
		re := regexp.MustCompile("^" + w)
		if !slices.ContainsFunc(lines, re.MatchString) {
			t.Errorf("no progress line matches %q\n%s", w, res)
		}
	}
}

// TestCLIProgress: ledger verify, backup and restore show their progress on stderr when it is
// not a terminal, as plain lines (every count here: the test makes the interval 0), and nothing
// with --quiet; stdout is what it was: verify's --json is the admin API's report, indented.
func TestCLIProgress(t *testing.T) {
	t.Setenv(progress.IntervalEnv, "0s")
	work := t.TempDir()
	s := startCLIServer(t, filepath.Join(work, "ledger"))
	for i := range 3 {
		id := caddyproc.Str(t, s.JSON("account", "create", "--email", fmt.Sprintf("prog%d@example.com", i)), "id")
		s.JSON("credits", "grant", "--account", id, "--credits", "5")
	}

	resp, err := http.Get("http://" + s.Admin + "/textgen/ledger/verify")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, bytes.TrimSpace(body), "", "  "); err != nil {
		t.Fatal(err)
	}
	indented.WriteByte('\n')

	res := s.Textgen("ledger", "verify", "--json")
	caddyproc.MustOneJSON(t, res)
	if res.Stdout != indented.String() {
		t.Errorf("verify --json printed\n%s\nthe admin API's report is\n%s", res.Stdout, indented.String())
	}
	wantProgress(t, res, `verifying: 0 of 3 accounts \(0%\)`, `verifying: \d of 3 accounts \(\d+%\), [\d.,]+/s`,
		`verifying: 3 accounts in \d+s`)
	quiet := s.Textgen("ledger", "verify", "--json", "--quiet")
	if quiet.Code != 0 || quiet.Stdout != indented.String() || quiet.Stderr != "" {
		t.Errorf("verify --quiet: want the same stdout and nothing on stderr\n%s", quiet)
	}
	table := s.Textgen("ledger", "verify", "-q")
	if table.Code != 0 || !strings.HasPrefix(table.Stdout, "ok: 3 accounts, ") || table.Stderr != "" {
		t.Errorf("verify -q\n%s", table)
	}
	table = s.Textgen("ledger", "verify")
	if table.Code != 0 || !strings.HasPrefix(table.Stdout, "ok: 3 accounts, ") {
		t.Errorf("verify\n%s", table)
	}
	wantProgress(t, table, `verifying: 3 accounts in \d+s`)

	backup := filepath.Join(work, "ledger.backup")
	res = s.Textgen("backup", "--output", backup, "--json")
	bk := caddyproc.MustOneJSON(t, res)
	if len(bk) != 3 || caddyproc.Str(t, bk, "output") != backup || caddyproc.Num(t, bk, "bytes") <= 0 {
		t.Errorf("backup: %v", bk)
	}
	// The server does not say how large the backup will be: bytes and rate, no share.
	wantProgress(t, res, `downloading the backup: [\d.]+ (B|KiB|MiB), `, `downloading the backup: [\d.]+ (B|KiB|MiB) in \d+s`)
	if strings.Contains(res.Stderr, "%") {
		t.Errorf("backup shows a share of an unknown total\n%s", res)
	}
	if q := s.Textgen("backup", "--output", backup, "--force", "--json", "--quiet"); q.Code != 0 || q.Stderr != "" {
		t.Errorf("backup --quiet\n%s", q)
	}
	s.Stop()

	res = caddyproc.Run(t, s.Home, "textgen", "restore", "--input", backup, "--ledger", filepath.Join(work, "restored"), "--json")
	r := caddyproc.MustOneJSON(t, res)
	if len(r) != 4 || !caddyproc.Bool(t, r, "restored") {
		t.Errorf("restore: %v", r)
	}
	wantProgress(t, res, `restoring: 0 B of [\d.]+ (B|KiB|MiB) \(0%\)`,
		`restoring: [\d.]+ (B|KiB|MiB) of [\d.]+ (B|KiB|MiB) \(100%\), [\d.]+ (B|KiB|MiB|GiB)/s, finishing`, `restoring: [\d.]+ (B|KiB|MiB) in \d+s`)
}
