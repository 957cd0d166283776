package ledger

import "hash/crc32"

// The API key format, for every engine: what CreateKey hands out and what LookupKey accepts
// before it looks anything up.

const (
	livePrefix = "tg_live_"
	testPrefix = "tg_test_"
	// A key is a prefix, 30 random base62 characters and 6 base62 characters of the CRC32
	// (IEEE) of everything before them; 62^6 > 2^32, so every checksum fits.
	keyRandomLen   = 30
	keyChecksumLen = 6
	keyLen         = len(livePrefix) + keyRandomLen + keyChecksumLen
)

// keyChecksum is the fixed-width, zero-padded base62 CRC32 of s.
func keyChecksum(s string) [keyChecksumLen]byte {
	var buf [keyLen]byte // no allocation for key-sized input
	return keyChecksumBytes(append(buf[:0], s...))
}

func keyChecksumBytes(b []byte) [keyChecksumLen]byte {
	v := crc32.ChecksumIEEE(b)
	var out [keyChecksumLen]byte
	for i := keyChecksumLen - 1; i >= 0; i-- {
		out[i] = base62[v%62]
		v /= 62
	}
	return out
}

// newFullKey makes a fresh API key for mode (a variable so that a test can choose a key's last
// characters).
var newFullKey = makeFullKey

func makeFullKey(m Mode) string {
	p := livePrefix
	if m == Test {
		p = testPrefix
	}
	body := p + randomBase62(keyRandomLen)
	sum := keyChecksum(body)
	return body + string(sum[:])
}

// CheckKeyFormat reports whether s is shaped like an API key (prefix, length, alphabet and
// checksum) and which mode its prefix names. It touches no store, so a server or a secret
// scanner can reject mistyped or made-up keys cheaply.
func CheckKeyFormat(s string) (Mode, bool) {
	var buf [keyLen]byte
	return checkKeyFormat(s, &buf)
}

// checkKeyFormat is CheckKeyFormat leaving the key's bytes in buf, for hashing without an
// allocation.
func checkKeyFormat(s string, buf *[keyLen]byte) (Mode, bool) {
	if len(s) != keyLen {
		return "", false
	}
	copy(buf[:], s)
	var m Mode
	switch s[:len(livePrefix)] {
	case livePrefix:
		m = Live
	case testPrefix:
		m = Test
	default:
		return "", false
	}
	for i := len(livePrefix); i < keyLen; i++ {
		if !isBase62[s[i]] {
			return "", false
		}
	}
	sum := keyChecksumBytes(buf[:keyLen-keyChecksumLen])
	if string(sum[:]) != s[keyLen-keyChecksumLen:] {
		return "", false
	}
	return m, true
}
