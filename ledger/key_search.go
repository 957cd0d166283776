package ledger

import (
	"context"
	"fmt"
	"strings"
)

// KeySearch finds API keys by what their users see of them: the hint My Account and the
// console show ("tg_live_…abcd"), the last 4 characters alone, or the key id. It is for the
// operator who is told "my key ending in abcd": the last 4 characters are not unique, so it
// lists every key that matches, revoked ones included.
type KeySearch interface {
	// FindKeys lists the keys that hint names (ParseKeyHint), newest first, at most limit
	// (1 to MaxKeySearch).
	//
	// Expected errors:
	//   - ErrInvalidArgument: a hint ParseKeyHint refuses, or limit out of range.
	//   - ErrClosed.
	FindKeys(ctx context.Context, hint string, limit int) ([]Key, error)
}

// MaxKeySearch is the most keys one FindKeys returns.
const MaxKeySearch = 100

// KeyHint is what a hint names: a key id, or the last 4 characters of a key's secret with its
// prefix ("tg_live_", "tg_test_") when the hint had one.
type KeyHint struct {
	ID     string
	Prefix string
	Last4  string
}

// ParseKeyHint reads a hint: "key_…" (an id), "tg_live_…abcd" (the ellipsis may be "...", or
// left out), "…abcd" or "abcd". A whole key is refused: it is a secret, not a hint.
func ParseKeyHint(s string) (KeyHint, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "key_") {
		if len(s) != KeyIDLen || !allBase62(s[len("key_"):]) {
			return KeyHint{}, fmt.Errorf("%q is not a key id (key_ and 12 letters or digits): %w", s, ErrInvalidArgument)
		}
		return KeyHint{ID: s}, nil
	}
	var h KeyHint
	for _, p := range []string{LivePrefix, TestPrefix} {
		if strings.HasPrefix(s, p) {
			h.Prefix, s = p, s[len(p):]
		}
	}
	if len(s) > 4 && !strings.HasPrefix(s, "…") && !strings.HasPrefix(s, "...") && h.Prefix != "" {
		return KeyHint{}, fmt.Errorf("that is a whole key, a secret: search by its hint (%s…%s) or its last 4 characters: %w",
			h.Prefix, "abcd", ErrInvalidArgument)
	}
	s = strings.TrimLeft(strings.TrimPrefix(s, "…"), ".")
	if len(s) != 4 || !allBase62(s) {
		return KeyHint{}, fmt.Errorf("a key's hint is tg_live_…abcd, its last 4 characters or its id key_…: %w", ErrInvalidArgument)
	}
	h.Last4 = s
	return h, nil
}

func allBase62(s string) bool {
	for i := range len(s) {
		if !isBase62[s[i]] {
			return false
		}
	}
	return s != ""
}

// Matches reports whether k is a key the hint names.
func (h KeyHint) Matches(k Key) bool {
	if h.ID != "" {
		return k.ID == h.ID
	}
	return k.Last4 == h.Last4 && (h.Prefix == "" || k.Prefix == h.Prefix)
}

// KeySearchArgs checks FindKeys' arguments.
func KeySearchArgs(hint string, limit int) (KeyHint, error) {
	if limit < 1 || limit > MaxKeySearch {
		return KeyHint{}, fmt.Errorf("limit %d is not 1 to %d: %w", limit, MaxKeySearch, ErrInvalidArgument)
	}
	return ParseKeyHint(hint)
}
