package caddymodule

import (
	"bytes"
	"fmt"
	"net/http"
	"unicode"
	"unicode/utf8"
)

// checkInput rejects an input the model cannot be charged for (docs/API.md, "Errors"): one with
// control characters other than tab, line feed and carriage return (NUL among them), and one in
// which nothing visible is left once white space, zero-width and other invisible characters are
// set aside. Lone UTF-16 surrogates were caught in the raw body (loneSurrogate).
func checkInput(s string) *apiError {
	visible := false
	for i, r := range s {
		if r == utf8.RuneError {
			// The JSON decoder writes U+FFFD for invalid UTF-8 and lone surrogates; both are
			// refused before this, so this is a U+FFFD the client sent: a visible character.
			visible = true
			continue
		}
		if unicode.IsControl(r) && r != '\t' && r != '\n' && r != '\r' {
			return newError(http.StatusBadRequest, "invalid_field", "input",
				fmt.Sprintf("input holds the control character U+%04X at byte %d; send text without control characters (tab, line feed and carriage return are fine)", r, i))
		}
		if !visible && !invisible(r) {
			visible = true
		}
	}
	if !visible {
		return newError(http.StatusBadRequest, "empty_input", "input",
			"input is empty or holds only white space and invisible characters; send the text the tool should work on")
	}
	return nil
}

// invisible reports a character that shows nothing on its own: white space, format characters
// (zero-width space and joiners, the byte order mark, soft hyphen...), variation selectors,
// Unicode's other default-ignorable code points (Hangul fillers...) and the blank braille
// pattern.
func invisible(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r) ||
		unicode.Is(unicode.Cf, r) ||
		unicode.Is(unicode.Variation_Selector, r) ||
		unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) ||
		r == '\u2800'
}

// loneSurrogate reports whether a JSON text holds a \u escape of a UTF-16 surrogate that is not
// part of a pair ("\ud800" alone). encoding/json quietly turns one into U+FFFD, so it is looked
// for in the raw body: the client sent text that is not Unicode, and should hear so.
func loneSurrogate(body []byte) bool {
	if !bytes.Contains(body, []byte(`\u`)) {
		return false // the common case: no \u escape at all, found without walking the body
	}
	inString := false
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 >= len(body) {
				return false
			}
			if body[i+1] != 'u' {
				i++ // a one-character escape such as \\ or \"
				continue
			}
			r, ok := hex4(body, i+2)
			if !ok {
				return false // malformed: the JSON decoder reports it
			}
			i += 5
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return true // a low surrogate with no high one before it
			case r >= 0xD800 && r <= 0xDBFF:
				if i+6 < len(body) && body[i+1] == '\\' && body[i+2] == 'u' {
					if lo, ok := hex4(body, i+3); ok && lo >= 0xDC00 && lo <= 0xDFFF {
						i += 6
						continue
					}
				}
				return true
			}
		}
	}
	return false
}

// hex4 reads four hex digits at body[i:].
func hex4(body []byte, i int) (rune, bool) {
	if i+4 > len(body) {
		return 0, false
	}
	var r rune
	for _, c := range body[i : i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}
