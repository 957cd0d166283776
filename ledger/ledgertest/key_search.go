package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// testFindKeys: a key is found by its id, by its hint as users see it and by its last 4
// characters, across accounts, newest first, revoked keys included, the mode's prefix
// respected; a rolled key by its new last 4 characters; malformed hints, a whole key and a
// limit out of range are refused.
func testFindKeys(t *testing.T, eng engine) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a, b := MustAccount(t, s, "find-a@example.com"), MustAccount(t, s, "find-b@example.com")
	full, k, err := s.CreateKey(bg, a.ID, ledger.Live, "a's", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(time.Second)
	testFull, tk, err := s.CreateKey(bg, b.ID, ledger.Test, "b's", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	ids := func(ks []ledger.Key) []string {
		var out []string
		for _, k := range ks {
			out = append(out, k.AccountID+"/"+k.ID)
		}
		return out
	}
	for _, c := range []struct {
		hint string
		want []string
	}{
		{k.ID, []string{a.ID + "/" + k.ID}},
		{tk.ID, []string{b.ID + "/" + tk.ID}},
		{"tg_live_…" + full[len(full)-4:], []string{a.ID + "/" + k.ID}},
		{" tg_live_..." + full[len(full)-4:] + " ", []string{a.ID + "/" + k.ID}},
		{"tg_live_" + full[len(full)-4:], []string{a.ID + "/" + k.ID}},
		{"…" + full[len(full)-4:], []string{a.ID + "/" + k.ID}},
		{full[len(full)-4:], []string{a.ID + "/" + k.ID}},
		{"tg_test_…" + testFull[len(testFull)-4:], []string{b.ID + "/" + tk.ID}},
		{"key_AAAAAAAAAAAA", nil},
	} {
		got, err := s.FindKeys(bg, c.hint, 10)
		if err != nil || len(got) != len(c.want) || (len(got) > 0 && ids(got)[0] != c.want[0]) {
			t.Fatalf("FindKeys(%q): %v %v, want %v", c.hint, ids(got), err, c.want)
		}
		if got == nil {
			t.Fatalf("FindKeys(%q): nil, want an empty list", c.hint)
		}
	}
	if full[len(full)-4:] != testFull[len(testFull)-4:] {
		if got, _ := s.FindKeys(bg, "tg_test_…"+full[len(full)-4:], 10); len(got) != 0 {
			t.Fatalf("a live key's last 4 found under the test prefix: %v", ids(got))
		}
	}

	// Same last 4 characters in two accounts (keys made to end alike; their checksum is not
	// checked here): both, newest first; the limit keeps the newest.
	last4 := full[len(full)-4:]
	ledger.NewFullKey = func(m ledger.Mode) string { return ledger.MakeFullKey(m)[:ledger.KeyLen-4] + last4 }
	t.Cleanup(func() { ledger.NewFullKey = ledger.MakeFullKey })
	t0 = t0.Add(time.Second)
	_, twin, err := s.CreateKey(bg, b.ID, ledger.Live, "b's twin", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(time.Second)
	_, tester, err := s.CreateKey(bg, b.ID, ledger.Test, "b's test twin", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	ledger.NewFullKey = ledger.MakeFullKey
	if _, err := s.RevokeKey(bg, b.ID, twin.ID); err != nil {
		t.Fatal(err)
	}
	got, err := s.FindKeys(bg, "tg_live_…"+last4, 10)
	if err != nil || len(got) != 2 || got[0].ID != twin.ID || got[1].ID != k.ID || got[0].Revoked.IsZero() {
		t.Fatalf("two live keys ending in %s: %v %v", last4, ids(got), err)
	}
	if got, err := s.FindKeys(bg, last4, 10); err != nil || len(got) != 3 || got[0].ID != tester.ID {
		t.Fatalf("every key ending in %s: %v %v", last4, ids(got), err)
	}
	if got, err := s.FindKeys(bg, last4, 1); err != nil || len(got) != 1 || got[0].ID != tester.ID {
		t.Fatalf("limit 1: %v %v", ids(got), err)
	}

	// A rolled key is found by its new last 4 characters.
	newFull, rolled, err := s.RollKey(bg, a.ID, k.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.FindKeys(bg, "tg_live_…"+newFull[len(newFull)-4:], 10); err != nil || len(got) == 0 || got[0].ID != rolled.ID {
		t.Fatalf("the rolled key: %v %v", ids(got), err)
	}

	for _, bad := range []string{"", "abc", "abcde", "ab-d", "key_short", "tg_live_", full, "tg_live_…ab", "acct_" + a.ID} {
		if got, err := s.FindKeys(bg, bad, 10); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Fatalf("FindKeys(%q): %v %v, want ErrInvalidArgument", bad, ids(got), err)
		}
	}
	for _, n := range []int{0, -1, ledger.MaxKeySearch + 1} {
		if _, err := s.FindKeys(bg, k.ID, n); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Fatalf("limit %d: %v", n, err)
		}
	}
}
