package ledger

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// The arguments of the listings, checked the same way for every engine: page sizes, cursors, and
// the preamble each List method of an engine starts with (an engine admits the call around it,
// in its own order).

// Page sizes of listings (Page.Limit).
const (
	defaultPageLimit = 50
	maxPageLimit     = 1000
)

// CheckListLimit is the length of a listing that takes a limit but no cursor
// (UnmatchedPayments, ListMail): 0 means defaultPageLimit, more than maxPageLimit means
// maxPageLimit.
func CheckListLimit(limit int) (int, error) {
	switch {
	case limit < 0:
		return 0, fmt.Errorf("limit must not be negative: %w", ErrInvalidArgument)
	case limit == 0:
		return defaultPageLimit, nil
	default:
		return min(limit, maxPageLimit), nil
	}
}

// pageLimit is the page size p asks for: the default for 0, at most maxPageLimit.
func pageLimit(p Page) (int, error) { return CheckListLimit(p.Limit) }

// The cursors of the listings (Page.Cursor), the same for every engine: base64 of "a:" and the
// last account id listed (ListAccounts), or of 'h' and the big-endian number of the last entry
// listed (History). A cursor an engine did not make is ErrInvalidArgument.

// AccountCursor is the cursor of the ListAccounts page that ended with the account whose
// e-mail address is email.
func AccountCursor(email string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("e:" + email))
}

// parseAccountCursor is the e-mail address after which the page of cursor starts ("" for none).
func parseAccountCursor(cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || !strings.HasPrefix(string(b), "e:") {
		return "", fmt.Errorf("cursor %q: %w", cursor, ErrInvalidArgument)
	}
	return string(b[2:]), nil
}

// HistoryCursor is the cursor of the History page that ended with entry seq.
func HistoryCursor(seq uint64) string {
	return base64.RawURLEncoding.EncodeToString(binary.BigEndian.AppendUint64([]byte{'h'}, seq))
}

// parseHistoryCursor is the entry number before which the page of cursor starts (0 for none:
// from the newest). An entry number is at least 1 (so a cursor's is at least 2) and fits an
// int64 (PostgreSQL's bigint).
func parseHistoryCursor(cursor string) (uint64, error) {
	if cursor == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(b) != 9 || binary.BigEndian.Uint64(b[1:]) < 2 || binary.BigEndian.Uint64(b[1:]) > math.MaxInt64 || b[0] != 'h' {
		return 0, fmt.Errorf("cursor %q: %w", cursor, ErrInvalidArgument)
	}
	return binary.BigEndian.Uint64(b[1:]), nil
}

// AccountPage is the preamble of ListAccounts: the page size and the account id after which the
// page starts.
func AccountPage(p Page) (limit int, after string, err error) {
	if limit, err = pageLimit(p); err != nil {
		return 0, "", err
	}
	if after, err = parseAccountCursor(p.Cursor); err != nil {
		return 0, "", err
	}
	return limit, after, nil
}

// HistoryPage is the preamble of History: the page size and the entry number before which the
// page starts (0: from the newest).
func HistoryPage(p Page) (limit int, before uint64, err error) {
	if limit, err = pageLimit(p); err != nil {
		return 0, 0, err
	}
	if before, err = parseHistoryCursor(p.Cursor); err != nil {
		return 0, 0, err
	}
	return limit, before, nil
}

// ReversalList is the preamble of ListReversals: the listing's length, once kind is checked.
func ReversalList(kind ReversalKind, limit int) (int, error) {
	limit, err := CheckListLimit(limit)
	if err != nil {
		return 0, err
	}
	if err := checkReversalKind(kind); err != nil {
		return 0, err
	}
	return limit, nil
}
