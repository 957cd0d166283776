package ledgertest

import (
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// testSettleDecidedAfterSweep: a settle decided while its hold was alive that arrives after the
// sweep voided the hold (its instance or the database stalled past the hold's life) charges it
// once, with the void and the settle in the history and the key's count taken again; a settle
// decided after the expiry, a hold really abandoned, and a credit spent meanwhile stay voided;
// two late settles at once charge once.
func testSettleDecidedAfterSweep(t *testing.T, eng engine) {
	t0 := time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 10*time.Minute)
	a := MustAccount(t, s, "late@example.com").ID
	MustGrant(t, s, a, ledger.Live, 3)
	_, k, err := s.CreateKey(bg, a, ledger.Live, "k", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	// Only a key with a budget is counted.
	if _, err := s.UpdateKey(bg, a, k.ID, ledger.KeySettings{Name: "k", Limits: ledger.KeyLimits{BudgetTotal: 100}}); err != nil {
		t.Fatal(err)
	}
	hold := func(rid string) {
		t.Helper()
		if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: rid, KeyID: k.ID, Tool: "summarize"}); err != nil {
			t.Fatal(err)
		}
	}
	keyTotal := func() int64 {
		t.Helper()
		keys, err := s.ListKeys(bg, a)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range keys {
			if x.ID == k.ID {
				return x.Usage.Total
			}
		}
		t.Fatal("key not listed")
		return 0
	}
	hold("late")
	hold("abandoned")
	decided := t0.Add(10*time.Minute - time.Second) // the text went out a second before the expiry
	t0 = t0.Add(10 * time.Minute)
	if n, err := eng.expire(t, s); err != nil || n != 2 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	if b := MustBalance(t, s, a); b.Balance != 3 || b.Available != 3 || keyTotal() != 0 {
		t.Fatalf("after the sweep: %+v, key counts %d", b, keyTotal())
	}
	t0 = t0.Add(time.Minute) // the settle arrives a minute after the sweep

	r, err := s.SettleDecided(bg, a, "late", decided)
	if err != nil || r.Repeated || r.State != ledger.HoldSettled || r.Available != 2 {
		t.Fatalf("settle decided before the expiry, after the sweep: %+v %v", r, err)
	}
	if b := MustBalance(t, s, a); b.Balance != 2 || b.Available != 2 || keyTotal() != 1 {
		t.Fatalf("after the late settle: %+v, key counts %d", b, keyTotal())
	}
	// Never twice: not by the same settle again, nor a plain one, nor a void.
	if r, err := s.SettleDecided(bg, a, "late", decided); err != nil || !r.Repeated || r.State != ledger.HoldSettled {
		t.Fatalf("late settle repeated: %+v %v", r, err)
	}
	if r, err := s.Settle(bg, a, "late"); err != nil || !r.Repeated || r.State != ledger.HoldSettled {
		t.Fatalf("settle after the late settle: %+v %v", r, err)
	}
	if r, err := s.Void(bg, a, "late", "client gone"); err != nil || !r.Repeated || r.State != ledger.HoldSettled {
		t.Fatalf("void after the late settle: %+v %v", r, err)
	}
	if h, err := s.GetHold(bg, a, "late"); err != nil || h.State != ledger.HoldSettled {
		t.Fatalf("hold after the late settle: %+v %v", h, err)
	}
	// A settle decided at or after the expiry, and a plain one, leave the abandoned hold voided.
	for _, at := range []time.Time{decided.Add(time.Second), t0} {
		if r, err := s.SettleDecided(bg, a, "abandoned", at); err != nil || !r.Repeated || r.State != ledger.HoldVoided {
			t.Fatalf("settle decided at %s of a hold expired at %s: %+v %v", at, decided.Add(time.Second), r, err)
		}
	}
	if r, err := s.Settle(bg, a, "abandoned"); err != nil || !r.Repeated || r.State != ledger.HoldVoided {
		t.Fatalf("plain settle of the swept hold: %+v %v", r, err)
	}
	if b := MustBalance(t, s, a); b.Balance != 2 || b.Available != 2 || keyTotal() != 1 {
		t.Fatalf("after the refused settles: %+v, key counts %d", b, keyTotal())
	}
	var kinds []string
	for _, e := range AllHistory(t, s, a) {
		if e.RequestID == "late" {
			kinds = append(kinds, string(e.Kind)+"/"+e.Reason)
		}
	}
	// The history is newest first.
	if len(kinds) != 3 || kinds[0] != "settle/"+ledger.SettledLateReason || kinds[1] != "void/expired" || kinds[2] != "hold/" {
		t.Fatalf("history of the late-settled request: %q", kinds)
	}
	VerifyClean(t, s)

	// The credit the void gave back was held again meanwhile: no credit to take, it stays voided.
	MustHold(t, s, a, ledger.Live, "spent1")
	MustHold(t, s, a, ledger.Live, "spent2")
	t0 = t0.Add(10 * time.Minute)
	if n, err := eng.expire(t, s); err != nil || n != 2 {
		t.Fatalf("second sweep: %d %v", n, err)
	}
	decided = t0.Add(-time.Second)
	MustHold(t, s, a, ledger.Live, "new1")
	MustHold(t, s, a, ledger.Live, "new2")
	if r, err := s.SettleDecided(bg, a, "spent1", decided); err != nil || !r.Repeated || r.State != ledger.HoldVoided || r.Available != 0 {
		t.Fatalf("late settle with no credit available: %+v %v", r, err)
	}
	if b := MustBalance(t, s, a); b.Balance != 2 || b.Available != 0 {
		t.Fatalf("after a refused late settle: %+v", b)
	}
	// Two late settles at once (two instances): one charge.
	if _, err := s.Void(bg, a, "new1", "test"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]ledger.HoldResult, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = s.SettleDecided(bg, a, "spent2", decided)
		}()
	}
	wg.Wait()
	charged := 0
	for i, r := range results {
		if errs[i] != nil || r.State != ledger.HoldSettled {
			t.Fatalf("concurrent late settle %d: %+v %v", i, r, errs[i])
		}
		if !r.Repeated {
			charged++
		}
	}
	if b := MustBalance(t, s, a); charged != 1 || b.Balance != 1 || b.Available != 0 {
		t.Fatalf("%d of 4 concurrent late settles charged; balance %+v", charged, b)
	}
	VerifyClean(t, s)
}
