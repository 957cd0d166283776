package badgerledger

import (
	"reflect"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// TestUnmatchedPaymentsSurviveReopen: recorded and resolved payments are on disk, not only in
// the process: after a reopen they list as before, a repeated record and resolution still
// report the first ones, and a resolution made before the reopen is not lost.
func TestUnmatchedPaymentsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 987654321, time.UTC)
	setNow(t, &t0)
	s := openDir(t, dir, quiet)
	if _, _, err := s.RecordUnmatchedPayment(bg, ledgertest.Unmatched("cs_1")); err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(time.Second)
	if _, _, err := s.RecordUnmatchedPayment(bg, ledgertest.Unmatched("cs_2")); err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(time.Second)
	if _, _, err := s.ResolveUnmatchedPayment(bg, "cs_1", "refunded"); err != nil {
		t.Fatal(err)
	}
	before := ledgertest.MustPayments(t, s, false, 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	t0 = t0.Add(time.Hour)
	s = openDir(t, dir, quiet)
	if got := ledgertest.MustPayments(t, s, false, 0); len(got) != 2 || !reflect.DeepEqual(got, before) {
		t.Fatalf("after reopen:\n got %+v\nwant %+v", got, before)
	}
	if got := ledgertest.Refs(ledgertest.MustPayments(t, s, true, 0)); !reflect.DeepEqual(got, []string{"cs_2"}) {
		t.Fatalf("open after reopen: %v", got)
	}
	if p, repeated, err := s.RecordUnmatchedPayment(bg, ledgertest.Unmatched("cs_2")); err != nil || !repeated || p != before[0] {
		t.Fatalf("record after reopen: %+v %v %v", p, repeated, err)
	}
	if p, repeated, err := s.ResolveUnmatchedPayment(bg, "cs_1", "credited by hand"); err != nil || !repeated || p != before[1] {
		t.Fatalf("resolve after reopen: %+v %v %v", p, repeated, err)
	}
	ledgertest.VerifyClean(t, s)
}
