package ledger

import (
	"hash/crc32"
	"strings"
)

// The API key format, for every engine: what CreateKey hands out and what LookupKey accepts
// before it looks anything up.

const (
	LivePrefix = "tg_live_"
	TestPrefix = "tg_test_"
	// A key is a prefix, 30 random Base62 characters and 6 Base62 characters of the CRC32
	// (IEEE) of everything before them; 62^6 > 2^32, so every checksum fits.
	keyRandomLen   = 30
	keyChecksumLen = 6
	KeyLen         = len(LivePrefix) + keyRandomLen + keyChecksumLen
)

// keyChecksum is the fixed-width, zero-padded Base62 CRC32 of s.
func keyChecksum(s string) [keyChecksumLen]byte {
	var buf [KeyLen]byte // no allocation for key-sized input
	return keyChecksumBytes(append(buf[:0], s...))
}

func keyChecksumBytes(b []byte) [keyChecksumLen]byte {
	v := crc32.ChecksumIEEE(b)
	var out [keyChecksumLen]byte
	for i := keyChecksumLen - 1; i >= 0; i-- {
		out[i] = Base62[v%62]
		v /= 62
	}
	return out
}

// NewFullKey makes a fresh API key for mode (a variable so that a test can choose a key's last
// characters).
var NewFullKey = MakeFullKey

func MakeFullKey(m Mode) string {
	p := LivePrefix
	if m == Test {
		p = TestPrefix
	}
	body := p + RandomBase62(keyRandomLen)
	sum := keyChecksum(body)
	return body + string(sum[:])
}

// CheckKeyFormat reports whether s is shaped like an API key (prefix, length, alphabet and
// checksum) and which mode its prefix names. It touches no store, so a server or a secret
// scanner can reject mistyped or made-up keys cheaply.
func CheckKeyFormat(s string) (Mode, bool) {
	var buf [KeyLen]byte
	return CheckKeyFormatInto(s, &buf)
}

// CheckKeyFormatInto is CheckKeyFormat leaving the key's bytes in buf, for hashing without an
// allocation.
func CheckKeyFormatInto(s string, buf *[KeyLen]byte) (Mode, bool) {
	if len(s) != KeyLen {
		return "", false
	}
	copy(buf[:], s)
	var m Mode
	switch s[:len(LivePrefix)] {
	case LivePrefix:
		m = Live
	case TestPrefix:
		m = Test
	default:
		return "", false
	}
	for i := len(LivePrefix); i < KeyLen; i++ {
		if !isBase62[s[i]] {
			return "", false
		}
	}
	sum := keyChecksumBytes(buf[:KeyLen-keyChecksumLen])
	if string(sum[:]) != s[KeyLen-keyChecksumLen:] {
		return "", false
	}
	return m, true
}

// keyHintLen is how many Base62 characters a hint ("tg_live_abcd") may put after a key's prefix:
// more than that is part of a key's secret.
const keyHintLen = 4

// ContainsKeySecret reports whether s holds a key's secret, or a piece of one, anywhere in it:
// a key's prefix followed by more Base62 characters than a hint has (the checksum right or
// not: a mistyped key is a secret too), or, without its prefix, the 36 characters of a key
// whose checksum is right. Quotes, "Bearer ", "X-API-Key: " or a trailing dot around a key do
// not hide it. A page that must never echo nor search by a secret refuses such input whole.
func ContainsKeySecret(s string) bool {
	for _, p := range []string{LivePrefix, TestPrefix} {
		for rest := s; ; {
			i := strings.Index(rest, p)
			if i < 0 {
				break
			}
			rest = rest[i+len(p):]
			if base62Run(rest) > keyHintLen {
				return true
			}
		}
	}
	// The secret without its prefix: a run of exactly a key's random part and checksum whose
	// checksum is right under either prefix.
	const body = keyRandomLen + keyChecksumLen
	for i := 0; i < len(s); {
		n := base62Run(s[i:])
		if n == 0 {
			i++
			continue
		}
		if n == body {
			run := s[i : i+n]
			for _, p := range []string{LivePrefix, TestPrefix} {
				if sum := keyChecksum(p + run[:keyRandomLen]); string(sum[:]) == run[keyRandomLen:] {
					return true
				}
			}
		}
		i += n
	}
	return false
}

// base62Run is how many Base62 characters s starts with.
func base62Run(s string) int {
	n := 0
	for n < len(s) && isBase62[s[n]] {
		n++
	}
	return n
}
