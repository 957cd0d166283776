package ledger

import (
	"strings"
	"testing"
)

func TestRandomBase62UsesWholeAlphabet(t *testing.T) {
	seen := map[rune]bool{}
	for _, c := range RandomBase62(5000) {
		if !strings.ContainsRune(Base62, c) {
			t.Fatalf("character %q is not base62", c)
		}
		seen[c] = true
	}
	if len(seen) != 62 {
		t.Fatalf("%d of 62 characters seen in 5000 draws", len(seen))
	}
	id := NewAccountID()
	if len(id) != AccountIDLen || !strings.HasPrefix(id, "acct_") {
		t.Fatalf("account id %q", id)
	}
	if kid := NewKeyID(); len(kid) != KeyIDLen || !strings.HasPrefix(kid, "key_") {
		t.Fatalf("key id %q", kid)
	}
}
