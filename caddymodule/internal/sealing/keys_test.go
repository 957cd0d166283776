package sealing

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestKeySources: a setting (its placeholders resolved) wins over the key file; without it the
// key file in Caddy's data directory is made once and read back the same, with a warning only
// where other instances share the ledger; what cannot be read or made is said with the
// setting, the file and the ways out.
func TestKeySources(t *testing.T) {
	data := t.TempDir()
	t.Setenv("XDG_DATA_HOME", data)
	want := bytes.Repeat([]byte{7}, 32)
	t.Setenv("TEXTGEN_TEST_SEALING_KEY", base64.StdEncoding.EncodeToString(want))
	core, logs := observer.New(zap.WarnLevel)
	log := zap.New(core)

	set := Key{Setting: "test_key", Value: "{env.TEXTGEN_TEST_SEALING_KEY}", File: "test.key", User: "test", Seals: "tests"}
	if got, err := set.Load(log, true); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("from the setting: %x %v", got, err)
	}
	if logs.Len() != 0 || fileExists(set.Path()) {
		t.Fatal("a key from its setting warned or made a key file")
	}
	bad := Key{Setting: "test_key", Value: "not base64!"}
	if _, err := bad.Load(log, false); err == nil || !strings.HasPrefix(err.Error(), "test_key: ") {
		t.Fatalf("a bad setting: %v, want an error naming test_key", err)
	}

	file := Key{Setting: "test_key", File: "test.key", User: "test", Seals: "tests"}
	if file.Path() != filepath.Join(data, "caddy", "textgen", "test.key") {
		t.Fatalf("the key file is %s, not in Caddy's data directory", file.Path())
	}
	k1, err := file.Load(log, false)
	if err != nil || len(k1) != 32 {
		t.Fatalf("making the key file: %v", err)
	}
	if st, err := os.Stat(file.Path()); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", st, err)
	}
	if logs.Len() != 0 {
		t.Fatal("warned about a key file of a ledger no other instance shares")
	}
	k2, err := file.Load(log, true)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("the key changed on reading it again: %v", err)
	}
	if w := logs.TakeAll(); len(w) != 1 || !strings.Contains(w[0].Message, "set the same test_key on every instance") {
		t.Fatalf("the warning of a shared ledger: %+v", w)
	}

	// A data directory where the key file cannot be made (a file stands where its folder goes).
	blocked := t.TempDir()
	t.Setenv("XDG_DATA_HOME", blocked)
	if err := os.WriteFile(filepath.Join(blocked, "caddy"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	off := Key{Setting: "test_key", File: "test.key", Without: "set tests off"}
	_, err = off.FromFile()
	if err == nil {
		t.Fatal("a key file was made where none can be")
	}
	for _, part := range []string{"no test_key", off.Path(), "set test_key, make Caddy's data directory writable, or set tests off"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("%q does not say %q", err, part)
		}
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
