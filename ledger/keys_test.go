package ledger

import (
	"bytes"
	"strings"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

func TestKeyFormat(t *testing.T) {
	subst := base62 + "_-. +/=~\x00\xff"
	for i := range 200 {
		m := Live
		if i%2 == 1 {
			m = Test
		}
		k := newFullKey(m)
		if got, ok := CheckKeyFormat(k); !ok || got != m {
			t.Fatalf("generated %s key %q: CheckKeyFormat = %q, %v", m, k, got, ok)
		}
		if len(k) != 44 || !strings.HasPrefix(k, "tg_"+string(m)+"_") {
			t.Fatalf("key %q has the wrong shape", k)
		}
		if i >= 20 {
			continue // the exhaustive checks below on 20 keys are plenty
		}
		for pos := range len(k) {
			for j := range len(subst) {
				c := subst[j]
				if c == k[pos] {
					continue
				}
				bad := k[:pos] + string(c) + k[pos+1:]
				if _, ok := CheckKeyFormat(bad); ok {
					t.Fatalf("key %q with %q at %d passes", k, c, pos)
				}
			}
			// Multi-byte replacement, deletion and insertion.
			for _, bad := range []string{k[:pos] + "é" + k[pos+1:], k[:pos] + k[pos+1:], k[:pos] + "a" + k[pos:]} {
				if _, ok := CheckKeyFormat(bad); ok {
					t.Fatalf("mangled key %q passes", bad)
				}
			}
		}
		for n := range len(k) {
			if _, ok := CheckKeyFormat(k[:n]); ok {
				t.Fatalf("truncated key %q passes", k[:n])
			}
		}
		// Adjacent transpositions (a common typo).
		for pos := 0; pos+1 < len(k); pos++ {
			if k[pos] == k[pos+1] {
				continue
			}
			b := []byte(k)
			b[pos], b[pos+1] = b[pos+1], b[pos]
			if _, ok := CheckKeyFormat(string(b)); ok {
				t.Fatalf("transposed key %q passes", b)
			}
		}
		// The other prefix, or another prefix, with the rest unchanged.
		other := "tg_test_"
		if m == Test {
			other = "tg_live_"
		}
		for _, p := range []string{other, "TG_LIVE_", "tg-live-", "sk_live_", "gh_test_"} {
			if _, ok := CheckKeyFormat(p + k[8:]); ok {
				t.Fatalf("key with prefix %q passes", p)
			}
		}
	}
	for _, bad := range []string{"", "tg_live_", "tg_live_" + strings.Repeat("0", 36), strings.Repeat("x", 44)} {
		if _, ok := CheckKeyFormat(bad); ok {
			t.Fatalf("%q passes", bad)
		}
	}
}

func TestKeyChecksumIsFixedWidth(t *testing.T) {
	// Whatever the CRC, the checksum is 6 base62 characters, zero-padded.
	for _, s := range []string{"", "a", "tg_live_x"} {
		sum := keyChecksum(s)
		for _, c := range sum {
			if !isBase62[c] {
				t.Fatalf("checksum %q of %q", sum, s)
			}
		}
	}
	if got := keyChecksum(""); string(got[:]) != "000000" { // crc32("") == 0
		t.Fatalf("checksum of the empty string is %q", got)
	}
}

func TestRandomBase62UsesWholeAlphabet(t *testing.T) {
	seen := map[rune]bool{}
	for _, c := range randomBase62(5000) {
		if !strings.ContainsRune(base62, c) {
			t.Fatalf("character %q is not base62", c)
		}
		seen[c] = true
	}
	if len(seen) != 62 {
		t.Fatalf("%d of 62 characters seen in 5000 draws", len(seen))
	}
	id := newAccountID()
	if len(id) != accountIDLen || !strings.HasPrefix(id, "acct_") {
		t.Fatalf("account id %q", id)
	}
	if kid := newKeyID(); len(kid) != keyIDLen || !strings.HasPrefix(kid, "key_") {
		t.Fatalf("key id %q", kid)
	}
}

func TestCreateLookupRevokeKey(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	setNow(t, &t0)
	s := newMem(t)
	a := mustAccount(t, s, "keys@example.com")

	full, k, err := s.CreateKey(bg, a.ID, Live, "laptop", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := CheckKeyFormat(full); !ok || m != Live {
		t.Fatalf("created key %q fails its format check", full)
	}
	if k.Prefix != "tg_live_" || k.Last4 != full[40:] || k.AccountID != a.ID || k.Name != "laptop" ||
		k.Mode != Live || !k.Created.Equal(t0) || !strings.HasPrefix(k.ID, "key_") || len(k.ID) != keyIDLen {
		t.Fatalf("key %+v", k)
	}
	t0 = t0.Add(time.Second) // ListKeys orders by creation time
	testFull, tk, err := s.CreateKey(bg, a.ID, Test, "", time.Time{})
	if err != nil || !strings.HasPrefix(testFull, "tg_test_") || tk.Mode != Test {
		t.Fatalf("test key %q %+v %v", testFull, tk, err)
	}

	got, acct, err := s.LookupKey(bg, full)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != k.ID || acct.ID != a.ID || acct.Status != StatusActive || !got.LastUsed.Equal(t0) {
		t.Fatalf("lookup: %+v %+v", got, acct)
	}
	keys, err := s.ListKeys(bg, a.ID)
	if err != nil || len(keys) != 2 || keys[0].ID != k.ID || !keys[0].LastUsed.Equal(t0) || !keys[1].LastUsed.IsZero() {
		t.Fatalf("list: %+v %v", keys, err)
	}

	// Garbage, well-formed unknown keys, and keys of the other mode all fail alike.
	for _, bad := range []string{"", "hello", full[:43], newFullKey(Live), strings.ToUpper(full)} {
		if _, _, err := s.LookupKey(bg, bad); err != ErrInvalidKey {
			t.Fatalf("lookup %q: %v", bad, err)
		}
	}

	// A disabled account's key still resolves, so the handler can answer 403.
	if _, err := s.SetAccountStatus(bg, a.ID, StatusDisabled); err != nil {
		t.Fatal(err)
	}
	if _, acct, err := s.LookupKey(bg, full); err != nil || acct.Status != StatusDisabled {
		t.Fatalf("lookup on disabled account: %+v %v", acct, err)
	}

	// Revocation takes effect on the next lookup.
	rk, err := s.RevokeKey(bg, a.ID, k.ID)
	if err != nil || rk.Revoked.IsZero() {
		t.Fatalf("revoke: %+v %v", rk, err)
	}
	if _, _, err := s.LookupKey(bg, full); err != ErrInvalidKey {
		t.Fatalf("lookup of revoked key: %v", err)
	}
	if _, err := s.RevokeKey(bg, a.ID, k.ID); err != ErrAlreadyRevoked {
		t.Fatalf("second revoke: %v", err)
	}
	b := mustAccount(t, s, "other@example.com")
	wantErr(t, func() error { _, err := s.RevokeKey(bg, b.ID, tk.ID); return err }(), ErrNotFound)
	wantErr(t, func() error { _, err := s.RevokeKey(bg, a.ID, "key_000000000000"); return err }(), ErrNotFound)

	// Expiry.
	efull, _, err := s.CreateKey(bg, b.ID, Live, "short", t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.LookupKey(bg, efull); err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(time.Hour)
	if _, _, err := s.LookupKey(bg, efull); err != ErrInvalidKey {
		t.Fatalf("lookup of expired key: %v", err)
	}

	// Bad arguments.
	for _, c := range []struct {
		acct, name string
		m          Mode
		exp        time.Time
		want       error
	}{
		{a.ID, "", "prod", time.Time{}, ErrInvalidArgument},
		{a.ID, strings.Repeat("n", 101), Live, time.Time{}, ErrInvalidArgument},
		{a.ID, "\xff", Live, time.Time{}, ErrInvalidArgument},
		{a.ID, "", Live, t0.Add(-time.Second), ErrInvalidArgument},
		{"acct_nope", "", Live, time.Time{}, ErrNotFound},
	} {
		_, _, err := s.CreateKey(bg, c.acct, c.m, c.name, c.exp)
		wantErr(t, err, c.want)
	}
	_, err = s.ListKeys(bg, "acct_nope")
	wantErr(t, err, ErrNotFound)

	// Only the digest is stored: the full key appears nowhere in the database.
	err = s.db.View(func(txn *badger.Txn) error {
		return iterate(txn, nil, func(k, v []byte) error {
			for _, f := range []string{full, testFull, efull, full[8:38]} {
				if bytes.Contains(k, []byte(f)) || bytes.Contains(v, []byte(f)) {
					t.Errorf("key material %q stored under %x", f, k)
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLastUsedFlushedNotWrittenPerLookup(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	setNow(t, &t0)
	s := openDir(t, dir, quiet)
	a := mustAccount(t, s, "lu@example.com")
	full, k, err := s.CreateKey(bg, a.ID, Live, "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	stored := func() Key {
		var rec keyRecord
		err := s.db.View(func(txn *badger.Txn) error {
			v, _, err := getValue(txn, keyRecordKey(a.ID, k.ID))
			if err != nil {
				return err
			}
			return jsonUnmarshal(v, &rec)
		})
		if err != nil {
			t.Fatal(err)
		}
		return rec.Key
	}
	t0 = t0.Add(time.Minute)
	if _, _, err := s.LookupKey(bg, full); err != nil {
		t.Fatal(err)
	}
	if !stored().LastUsed.IsZero() {
		t.Fatal("a lookup wrote to disk")
	}
	if err := s.flushLastUsed(true); err != nil {
		t.Fatal(err)
	}
	if got := stored().LastUsed; !got.Equal(t0) {
		t.Fatalf("flushed last use %v, want %v", got, t0)
	}
	// Close flushes too.
	t0 = t0.Add(time.Minute)
	if _, _, err := s.LookupKey(bg, full); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDir(t, dir, quiet)
	keys, err := s.ListKeys(bg, a.ID)
	if err != nil || len(keys) != 1 || !keys[0].LastUsed.Equal(t0) {
		t.Fatalf("after reopen: %+v %v", keys, err)
	}
}
