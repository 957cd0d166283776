package pgledger

import (
	"fmt"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestPostgresHoldFunctionsAgree: ledger_hold (a lone hold operation, every operation at one
// caller) and ledger_holds (several in one batch) give the same outcomes and write the same
// entries, for every outcome there is. The conformance suite runs mostly one caller at a time,
// so it mostly exercises ledger_hold; this runs the same script both ways.
func TestPostgresHoldFunctionsAgree(t *testing.T) {
	s := openPostgres(t, pgtest.NewDatabase(t), pgQuiet)
	ts := now().UnixNano()
	hour := int64(time.Hour)
	type step struct{ op, rid, mode, reason, acct string }
	script := []step{
		{op: "hold", rid: "r1", mode: "live"},
		{op: "hold", rid: "r1", mode: "live"}, // repeated, open
		{op: "hold", rid: "r2", mode: "test"},
		{op: "hold", rid: "r3", mode: "test"}, // insufficient
		{op: "hold", rid: "r4", mode: "live"},
		{op: "hold", rid: "r5", mode: "live"}, // insufficient
		{op: "settle", rid: "r1"},
		{op: "settle", rid: "r1"},                   // repeated, settled
		{op: "void", rid: "r1", reason: "too late"}, // repeated, settled
		{op: "void", rid: "r2", reason: "client went away"},
		{op: "settle", rid: "r9"}, // no hold
		{op: "expire", rid: "r4"}, // not expired yet: repeated, open
		{op: "expire", rid: "r4", reason: "later"},
		{op: "settle", rid: "r4"}, // repeated, voided
		{op: "hold", rid: "r6", mode: "test"},
		{op: "hold", rid: "x1", mode: "live", acct: "missing"},
		{op: "settle", rid: "x1", acct: "missing"},
		{op: "hold", rid: "d2", mode: "live", acct: "disabled"},
		{op: "hold", rid: "d1", mode: "live", acct: "disabled"}, // repeated comes first
		{op: "settle", rid: "d1", acct: "disabled"},
	}
	// Each way gets accounts of its own with the same past: 2 live and 1 test credit, and a
	// disabled account with an open hold.
	accounts := func(way string) map[string]string {
		acct := ledgertest.MustAccount(t, s, way+"@example.com").ID
		ledgertest.MustGrant(t, s, acct, ledger.Live, 2)
		ledgertest.MustGrant(t, s, acct, ledger.Test, 1)
		off := ledgertest.MustAccount(t, s, way+"-off@example.com").ID
		ledgertest.MustGrant(t, s, off, ledger.Live, 1)
		ledgertest.MustHold(t, s, off, ledger.Live, "d1")
		if _, err := s.SetAccountStatus(bg, off, ledger.StatusDisabled); err != nil {
			t.Fatal(err)
		}
		return map[string]string{"": acct, "disabled": off, "missing": "acct_missing" + way}
	}
	calls := func(ids map[string]string) []*pgCall {
		out := make([]*pgCall, len(script))
		for i, st := range script {
			at := ts
			if st.reason == "later" {
				at += 2 * hour
			}
			out[i] = &pgCall{acct: ids[st.acct], done: make(chan struct{}), hold: &pgHoldOp{
				op: st.op, rid: st.rid, mode: st.mode, reason: st.reason, at: at, expires: ts + hour}}
		}
		return out
	}
	alone, together := accounts("alone"), accounts("together")
	one, all := calls(alone), calls(together)
	for _, c := range one {
		s.c.commit([]*pgCall{c})
	}
	s.c.commit(all)
	for i := range script {
		if one[i].err != nil || all[i].err != nil {
			t.Fatalf("step %d %+v: errors %v / %v", i, script[i], one[i].err, all[i].err)
		}
		if one[i].hold.out != all[i].hold.out {
			t.Errorf("step %d %+v: alone %+v, in a batch %+v", i, script[i], one[i].hold.out, all[i].hold.out)
		}
	}
	if got := all[0].hold.out.outcome + all[3].hold.out.outcome + all[10].hold.out.outcome + all[15].hold.out.outcome +
		all[17].hold.out.outcome; got != "okinsufficientno_holdnot_founddisabled" {
		t.Errorf("outcomes %q: the script does not test what it means to", got)
	}
	for _, key := range []string{"", "disabled"} {
		a, b := ledgertest.AllHistory(t, s, alone[key]), ledgertest.AllHistory(t, s, together[key])
		if len(a) != len(b) {
			t.Fatalf("%q: %d entries alone, %d in a batch", key, len(a), len(b))
		}
		for i := range a {
			a[i].AccountID, b[i].AccountID = "", ""
			a[i].Time, b[i].Time = time.Time{}, time.Time{}
			if fmt.Sprint(a[i]) != fmt.Sprint(b[i]) {
				t.Errorf("%q entry %d: alone %+v, in a batch %+v", key, i, a[i], b[i])
			}
		}
	}
	ledgertest.VerifyClean(t, s)
}
