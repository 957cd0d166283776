package ledgertest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

func testHistoryPages(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "p@example.com").ID
	for range 25 {
		MustGrant(t, s, a, ledger.Live, 1)
	}
	var seqs []uint64
	var sizes []int
	cur := ""
	for {
		es, next, err := s.History(bg, a, ledger.Page{Cursor: cur, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(es))
		for _, e := range es {
			seqs = append(seqs, e.Seq)
		}
		if next == "" {
			break
		}
		cur = next
	}
	if !reflect.DeepEqual(sizes, []int{10, 10, 5}) {
		t.Fatalf("page sizes %v", sizes)
	}
	for i, seq := range seqs {
		if seq != uint64(25-i) {
			t.Fatalf("seqs %v are not newest first", seqs)
		}
	}
	// Exactly one page when the limit matches the count.
	es, next, err := s.History(bg, a, ledger.Page{Limit: 25})
	if err != nil || len(es) != 25 || next != "" {
		t.Fatalf("full page: %d %q %v", len(es), next, err)
	}
	es, next, err = s.History(bg, a, ledger.Page{})
	if err != nil || len(es) != 25 || next != "" {
		t.Fatalf("default page: %d %q %v", len(es), next, err)
	}
	// An account without entries, an unknown account, bad cursors.
	b := MustAccount(t, s, "p2@example.com").ID
	if es, next, err := s.History(bg, b, ledger.Page{}); err != nil || len(es) != 0 || next != "" {
		t.Fatalf("empty history: %v %q %v", es, next, err)
	}
	_, _, err = s.History(bg, "acct_missing", ledger.Page{})
	WantErr(t, err, ledger.ErrNotFound)
	for _, c := range []string{"x", "aGVsbG8", "aAAAAAAAAAAB"} {
		_, _, err := s.History(bg, a, ledger.Page{Cursor: c})
		WantErr(t, err, ledger.ErrInvalidArgument)
	}
}

func testUsage(t *testing.T, eng engine) {
	day1 := time.Date(2030, 6, 1, 23, 0, 0, 0, time.UTC)
	t0 := day1
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a := MustAccount(t, s, "u1@example.com").ID
	b := MustAccount(t, s, "u2@example.com").ID
	for _, id := range []string{a, b} {
		MustGrant(t, s, id, ledger.Live, 100)
		MustGrant(t, s, id, ledger.Test, 100)
	}
	n := 0
	do := func(acct string, m ledger.Mode, tool string, settle bool) {
		n++
		rid := fmt.Sprint("r", n)
		price := int64(1)
		if tool == "translate" {
			price = 3 // a tool with a price: Credits counts it, Settled counts the request
		}
		if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: acct, Mode: m, RequestID: rid, Tool: tool, Credits: price}); err != nil {
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
	do(a, ledger.Live, "summarize", true)
	do(a, ledger.Live, "summarize", true)
	do(a, ledger.Live, "summarize", false)
	do(a, ledger.Test, "summarize", true)
	do(b, ledger.Live, "translate", true)
	t0 = t0.Add(2 * time.Hour) // next UTC day
	do(a, ledger.Live, "summarize", true)
	MustHold(t, s, b, ledger.Live, "open-one") // a hold without outcome yet

	rows, err := s.Usage(bg, ledger.UsageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	// Day 2 adds a's settled request and b's still open hold (MustHold's tool is "summarize").
	want := []ledger.UsageRow{
		{Day: "2030-06-01", Tool: "summarize", Mode: ledger.Live, Requests: 3, Settled: 2, Voided: 1, Credits: 2},
		{Day: "2030-06-01", Tool: "summarize", Mode: ledger.Test, Requests: 1, Settled: 1, Credits: 1},
		{Day: "2030-06-01", Tool: "translate", Mode: ledger.Live, Requests: 1, Settled: 1, Credits: 3},
		{Day: "2030-06-02", Tool: "summarize", Mode: ledger.Live, Requests: 2, Settled: 1, Credits: 1},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("usage\n got %+v\nwant %+v", rows, want)
	}
	rows, err = s.Usage(bg, ledger.UsageQuery{AccountID: b})
	if err != nil || !reflect.DeepEqual(rows, []ledger.UsageRow{
		{Day: "2030-06-01", Tool: "translate", Mode: ledger.Live, Requests: 1, Settled: 1, Credits: 3},
		{Day: "2030-06-02", Tool: "summarize", Mode: ledger.Live, Requests: 1},
	}) {
		t.Fatalf("usage of b: %+v %v", rows, err)
	}
	// By key: the same rows, each with the key of its requests (MustHold's is key_test).
	rows, err = s.Usage(bg, ledger.UsageQuery{AccountID: b, ByKey: true})
	if err != nil || !reflect.DeepEqual(rows, []ledger.UsageRow{
		{Day: "2030-06-01", Tool: "translate", Mode: ledger.Live, Requests: 1, Settled: 1, Credits: 3},
		{Day: "2030-06-02", Tool: "summarize", Mode: ledger.Live, KeyID: "key_test", Requests: 1},
	}) {
		t.Fatalf("usage of b by key: %+v %v", rows, err)
	}
	rows, err = s.Usage(bg, ledger.UsageQuery{AccountID: a, From: day1.Add(time.Hour), To: day1.Add(3 * time.Hour)})
	if err != nil || !reflect.DeepEqual(rows, []ledger.UsageRow{{Day: "2030-06-02", Tool: "summarize", Mode: ledger.Live, Requests: 1, Settled: 1, Credits: 1}}) {
		t.Fatalf("usage of a on day 2: %+v %v", rows, err)
	}
	// From alone (My Account's last 30 days): Badger reads a's entries newest first and stops
	// before day 1's.
	rows, err = s.Usage(bg, ledger.UsageQuery{AccountID: a, From: day1.Add(time.Hour)})
	if err != nil || !reflect.DeepEqual(rows, []ledger.UsageRow{{Day: "2030-06-02", Tool: "summarize", Mode: ledger.Live, Requests: 1, Settled: 1, Credits: 1}}) {
		t.Fatalf("usage of a from day 2: %+v %v", rows, err)
	}
	_, err = s.Usage(bg, ledger.UsageQuery{AccountID: "acct_missing"})
	WantErr(t, err, ledger.ErrNotFound)
}
