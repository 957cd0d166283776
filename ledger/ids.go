package ledger

import (
	"crypto/rand"
	"encoding/hex"
)

// Ids and secrets of every engine: account ids, key ids, session and CSRF tokens, all random
// Base62 strings drawn from crypto/rand, and the public name of a session. A second engine
// makes them here so that they look the same whichever store made them.

const Base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// Account ids are "acct_" + 16 Base62 characters, key ids "key_" + 12: fixed widths, so that
// an engine can lay them out in fixed-width keys (badgerledger/prefix.go).
const (
	AccountIDLen = len("acct_") + 16
	KeyIDLen     = len("key_") + 12
)

var isBase62 = func() (t [256]bool) {
	for i := range len(Base62) {
		t[Base62[i]] = true
	}
	return t
}()

// RandomBase62 returns n characters drawn uniformly from Base62 with crypto/rand; bytes >= 248
// (4*62) are rejected so that no character is more likely than another.
func RandomBase62(n int) string {
	out := make([]byte, 0, n)
	var buf [64]byte
	for len(out) < n {
		rand.Read(buf[:]) // never fails (crypto/rand crashes the program instead)
		for _, b := range buf {
			if b < 248 {
				out = append(out, Base62[b%62])
				if len(out) == n {
					break
				}
			}
		}
	}
	return string(out)
}

func NewAccountID() string { return "acct_" + RandomBase62(16) }
func NewKeyID() string     { return "key_" + RandomBase62(12) }

// Session and CSRF tokens are random Base62 strings of a fixed length.
const (
	SessionTokenLen = 43 // Base62 characters, about 256 bits
	CsrfTokenLen    = 43
)

// SessionID is the public name of the session whose token has the SHA-256 digest d.
func SessionID(d [32]byte) string { return "ses_" + hex.EncodeToString(d[:6]) }

// LooksLikeToken rejects what CreateSession cannot have made, before any lookup.
func LooksLikeToken(t string) bool {
	if len(t) != SessionTokenLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		if !isBase62[t[i]] {
			return false
		}
	}
	return true
}
