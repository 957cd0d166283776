package ledger

import (
	"strings"
	"testing"
)

func TestKeyFormat(t *testing.T) {
	subst := Base62 + "_-. +/=~\x00\xff"
	for i := range 200 {
		m := Live
		if i%2 == 1 {
			m = Test
		}
		k := NewFullKey(m)
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
	// Whatever the CRC, the checksum is 6 Base62 characters, zero-padded.
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

// TestContainsKeySecret: a key is found wherever it stands in the input (quoted, after
// "Bearer " or "X-API-Key: ", before a dot, without its prefix), and so is a mistyped key or a
// piece of one; a hint, a key id and ordinary search words are not secrets.
func TestContainsKeySecret(t *testing.T) {
	for _, m := range []Mode{Live, Test} {
		k := NewFullKey(m)
		mistyped := k[:20] + string(Base62[(strings.IndexByte(Base62, k[20])+1)%62]) + k[21:]
		if _, ok := CheckKeyFormat(mistyped); ok {
			t.Fatal("the mistyped key passes the checksum")
		}
		for _, in := range []string{
			k, " " + k + " ", `"` + k + `"`, "'" + k + "'", k + ".", "Bearer " + k, "Authorization: Bearer " + k,
			"X-API-Key: " + k, "x-api-key:" + k, "key=" + k + "&x=1", "<" + k + ">", "mine is " + k + ", thanks",
			k[len("tg_live_"):], `"` + k[len("tg_live_"):] + `"`, mistyped, k[:20], k[:len("tg_live_")+5],
			"abcd " + k,
		} {
			if !ContainsKeySecret(in) {
				t.Errorf("ContainsKeySecret(%q) = false", in)
			}
		}
		for _, in := range []string{
			"", "abcd", "tg_live_…abcd", "tg_test_...abcd", "tg_live_abcd", "…abcd", "key_AAAAAAAAAAAA",
			"acct_AAAAAAAAAAAAAAAA", "someone@example.com", "tg_live_", "hello world",
			k[len("tg_live_"):len(k)-1] + "x", // 36 characters without a key's checksum (one in 62^6 may have one by chance)
		} {
			if strings.HasSuffix(in, "x") && len(in) == 36 {
				if _, ok := CheckKeyFormat("tg_live_" + in); ok {
					continue
				}
				if _, ok := CheckKeyFormat("tg_test_" + in); ok {
					continue
				}
			}
			if ContainsKeySecret(in) {
				t.Errorf("ContainsKeySecret(%q) = true", in)
			}
		}
	}
}
