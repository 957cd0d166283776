package jsonenc

import (
	"encoding/json"
	"testing"
)

// AppendString is encoding/json's string encoding: every case here, from the SSE pieces'
// (line breaks, U+2028) to HTML characters and broken UTF-8, equals json.Marshal's bytes. The
// ledger's record tests (ledger/badgerledger/records_json_test.go) compare it further, with random and
// fuzzed strings.
func TestAppendStringIsEncodingJSON(t *testing.T) {
	for in, want := range map[string]string{
		"plain":           `"plain"`,
		"a\"b\\c":         `"a\"b\\c"`,
		"line\nnext\r\tx": `"line\nnext\r\tx"`,
		"\x00\x1f\b\f":    `"\u0000\u001f\b\f"`,
		"ü€😀":             `"ü€😀"`,
		"a\u2028b\u2029c": `"a\u2028b\u2029c"`,
		"<a href=x>&amp;": `"\u003ca href=x\u003e\u0026amp;"`,
		"bad \xff\xfe":    `"bad \ufffd\ufffd"`,
		"del \x7f":        "\"del \x7f\"",
		"":                `""`,
	} {
		got := string(AppendString(nil, in))
		if got != want {
			t.Errorf("%q: got %s, want %s", in, got, want)
		}
		std, _ := json.Marshal(in)
		if got != string(std) {
			t.Errorf("%q: got %s, encoding/json %s", in, got, std)
		}
	}
}
