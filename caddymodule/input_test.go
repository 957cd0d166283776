package caddymodule

import "testing"

// TestCheckInput: an input with nothing visible is empty_input, one with control characters
// invalid_field; real text in any script passes, with white space, emoji joiners and U+FFFD.
func TestCheckInput(t *testing.T) {
	for in, code := range map[string]string{
		" \n\t ":                    "empty_input",
		"\u200b\u200b\ufeff":        "empty_input", // zero-width spaces and a byte order mark
		"\u00ad\u2060\u180e":        "empty_input", // soft hyphen, word joiner, Mongolian vowel separator
		"\u3164\u115f\u2800 \ufe0f": "empty_input", // Hangul fillers, blank braille, a variation selector
		"\u2028\u00a0\u3000":        "empty_input", // line separator, no-break and ideographic spaces
		"\u0000":                    "invalid_field",
		"hello\u0000world":          "invalid_field",
		"bell\u0007":                "invalid_field",
		"esc \u001b[31m":            "invalid_field",
		"del\u007f":                 "invalid_field",
		"c1\u0085":                  "invalid_field",
	} {
		e := checkInput(in)
		if e == nil || e.Code != code || e.Param != "input" || e.Status != 400 {
			t.Errorf("%q: %v, want 400 %s", in, e, code)
		}
	}
	for _, in := range []string{"x", " a ", "Zusammenfassung\tbitte\r\n", "日本語", "👩\u200d💻", "\ufffd", "é", "\u200bx"} {
		if e := checkInput(in); e != nil {
			t.Errorf("%q refused: %v", in, e)
		}
	}
}

// TestLoneSurrogate: a \u escape of half a UTF-16 pair is refused as invalid_utf8 before the
// JSON decoder turns it into U+FFFD; pairs, escaped backslashes and other escapes pass.
func TestLoneSurrogate(t *testing.T) {
	for body, lone := range map[string]bool{
		`{"input":"\ud800"}`:              true,
		`{"input":"\uDBFF x"}`:            true,
		`{"input":"\udc00"}`:              true,
		`{"input":"a\ud83d\u0041"}`:       true,
		`{"input":"\ud83d"}`:              true,
		`{"input":"\ud83d\ude00"}`:        false, // a pair: U+1F600
		`{"input":"\\ud800"}`:             false, // an escaped backslash, then the text ud800
		`{"input":"\"\u00fc\n"}`:          false,
		`{"tool":"x","input":"ok"}`:       false,
		`{"input":"\ud83d\ude00\ud800"}`:  true,
		`{"input":"\u0041\u0042", "x":1}`: false,
	} {
		if got := loneSurrogate([]byte(body)); got != lone {
			t.Errorf("%s: lone %v, want %v", body, got, lone)
		}
		if lone {
			if _, e := parseGenRequest([]byte(`{"tool":"summarizer","language":"de",` + body[1:])); e == nil || e.Code != "invalid_utf8" {
				t.Errorf("%s: parse gave %v, want invalid_utf8", body, e)
			}
		}
	}
}
