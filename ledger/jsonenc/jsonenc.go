// Package jsonenc writes JSON strings exactly as encoding/json does, without reflection: for
// the ledger's records, which must stay byte-identical to encoding/json's (ledger's tests
// compare them), and for the text pieces of the API's server-sent events (caddymodule), where a
// string is written for every piece of every generation. It lives under ledger/ because the
// ledger, which may import neither caddymodule nor backends, is where its exactness matters.
package jsonenc

import "unicode/utf8"

// safe[b] is true for the ASCII bytes encoding/json writes as they are with HTML escaping on
// (its htmlSafeSet): not control characters, '"', '\\', '<', '>' or '&'. DEL (0x7f) is safe.
var safe = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()

const hex = "0123456789abcdef"

// AppendString appends s quoted as encoding/json writes a string with HTML escaping (the
// default of json.Marshal): \" \\ \b \f \n \r \t, other control characters and < > & as \u00xx
// (lower-case hex), U+2028 and U+2029 as \u2028 \u2029, each byte of invalid UTF-8 as \ufffd.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if safe[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
