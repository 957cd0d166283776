package ledger

import (
	"strings"
	"testing"
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
