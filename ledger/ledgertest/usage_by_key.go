package ledgertest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// testUsageByKey: an account's holds, settles and voids are counted per key, tool and mode,
// within the query's times, never another account's; the account is required and must exist.
func testUsageByKey(t *testing.T, eng engine) {
	t0 := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a := MustAccount(t, s, "k1@example.com").ID
	b := MustAccount(t, s, "k2@example.com").ID
	for _, id := range []string{a, b} {
		MustGrant(t, s, id, ledger.Live, 100)
		MustGrant(t, s, id, ledger.Test, 100)
	}
	n := 0
	do := func(acct, key string, m ledger.Mode, tool string, settle bool) {
		n++
		rid := fmt.Sprint("r", n)
		if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: m, RequestID: rid, KeyID: key, Tool: tool}); err != nil {
			t.Fatal(err)
		}
		var err error
		if settle {
			_, err = s.Settle(bg, acct, rid)
		} else {
			_, err = s.Void(bg, acct, rid, "backend_error")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	do(a, "key_app", ledger.Live, "summarizer", true) // before the query's start
	t1 := t0.Add(time.Hour)
	t0 = t1
	do(a, "key_app", ledger.Live, "summarizer", true)
	do(a, "key_app", ledger.Live, "summarizer", false)
	do(a, "key_app", ledger.Live, "translator", true)
	do(a, "key_team", ledger.Live, "summarizer", true)
	do(a, "key_test", ledger.Test, "summarizer", true)
	do(b, "key_app", ledger.Live, "summarizer", true) // another account, the same key id
	t0 = t0.Add(time.Hour)
	do(a, "key_team", ledger.Live, "translator", true) // at the query's end: not counted

	rows, err := s.UsageByKey(bg, ledger.UsageQuery{AccountID: a, From: t1, To: t0})
	if err != nil {
		t.Fatal(err)
	}
	want := []ledger.KeyUsageRow{
		{KeyID: "key_app", Tool: "summarizer", Mode: ledger.Live, Requests: 2, Settled: 1, Voided: 1, Credits: 1},
		{KeyID: "key_app", Tool: "translator", Mode: ledger.Live, Requests: 1, Settled: 1, Credits: 1},
		{KeyID: "key_team", Tool: "summarizer", Mode: ledger.Live, Requests: 1, Settled: 1, Credits: 1},
		{KeyID: "key_test", Tool: "summarizer", Mode: ledger.Test, Requests: 1, Settled: 1, Credits: 1},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("usage by key:\n got %+v\nwant %+v", rows, want)
	}
	all, err := s.UsageByKey(bg, ledger.UsageQuery{AccountID: a})
	if err != nil {
		t.Fatal(err)
	}
	var settled int64
	for _, r := range all {
		settled += r.Settled
	}
	if len(all) != 5 || settled != 6 {
		t.Fatalf("usage by key of the whole history: %+v", all)
	}
	_, err = s.UsageByKey(bg, ledger.UsageQuery{})
	WantErr(t, err, ledger.ErrInvalidArgument)
	_, err = s.UsageByKey(bg, ledger.UsageQuery{AccountID: "acct_missing"})
	WantErr(t, err, ledger.ErrNotFound)
}
