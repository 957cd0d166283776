package ledgertest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// The Alerts role: an account's HTTPS endpoints and the outbox of their deliveries. Run for
// every engine by the conformance suite.

// MustAlertEndpoint registers an endpoint of url for the account, subscribed to kinds.
func MustAlertEndpoint(t *testing.T, s ledger.Alerts, acct, url string, kinds ...string) ledger.AlertEndpoint {
	t.Helper()
	e, err := s.CreateAlertEndpoint(bg, ledger.AlertEndpoint{AccountID: acct, URL: url, Kinds: kinds, SealedSecret: []byte("sealed secret of " + url)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// testAlertEndpoints: bad endpoints are refused, an account has at most MaxAlertEndpoints,
// they are listed oldest first with their kinds and sealed secret, and deleted by their
// account only.
func testAlertEndpoints(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	eng.setNow(t, &clock)
	a := MustAccount(t, s, "hooks@example.com")
	b := MustAccount(t, s, "other@example.com")
	for _, e := range []ledger.AlertEndpoint{
		{AccountID: a.ID, URL: "http://example.com/hook", SealedSecret: []byte("x")},
		{AccountID: a.ID, URL: "https:///nohost", SealedSecret: []byte("x")},
		{AccountID: a.ID, URL: "https://example.com/hook", Kinds: []string{"balance.nope"}, SealedSecret: []byte("x")},
		{AccountID: a.ID, URL: "https://example.com/hook"},
	} {
		if _, err := s.CreateAlertEndpoint(bg, e); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Fatalf("endpoint %+v: %v; want ErrInvalidArgument", e, err)
		}
	}
	if _, err := s.CreateAlertEndpoint(bg, ledger.AlertEndpoint{AccountID: "acct_nonenonenonenone00", URL: "https://example.com/h", SealedSecret: []byte("x")}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("endpoint of an unknown account: %v", err)
	}
	first := MustAlertEndpoint(t, s, a.ID, "https://example.com/one", ledger.AlertPurchaseCompleted, ledger.AlertBalanceLow, ledger.AlertBalanceLow)
	if !slices.Equal(first.Kinds, []string{ledger.AlertBalanceLow, ledger.AlertPurchaseCompleted}) || !first.Created.Equal(clock) || first.ID == "" {
		t.Fatalf("created %+v", first)
	}
	for i := 1; i < ledger.MaxAlertEndpoints; i++ {
		clock = clock.Add(time.Millisecond)
		MustAlertEndpoint(t, s, a.ID, fmt.Sprintf("https://example.com/%d", i))
	}
	if _, err := s.CreateAlertEndpoint(bg, ledger.AlertEndpoint{AccountID: a.ID, URL: "https://example.com/more", SealedSecret: []byte("x")}); !errors.Is(err, ledger.ErrTooManyAlertEndpoints) {
		t.Fatalf("endpoint over the cap: %v", err)
	}
	MustAlertEndpoint(t, s, b.ID, "https://example.com/b") // another account's cap is its own
	all, err := s.ListAlertEndpoints(bg, a.ID)
	if err != nil || len(all) != ledger.MaxAlertEndpoints || all[0].ID != first.ID || all[1].URL != "https://example.com/1" ||
		string(all[0].SealedSecret) != "sealed secret of https://example.com/one" || !slices.Equal(all[0].Kinds, first.Kinds) || all[1].Kinds != nil {
		t.Fatalf("listed %+v, %v", all, err)
	}
	if err := s.DeleteAlertEndpoint(bg, b.ID, first.ID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("deleting another account's endpoint: %v", err)
	}
	if err := s.DeleteAlertEndpoint(bg, a.ID, "nonsense"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("deleting a malformed id: %v", err)
	}
	if err := s.DeleteAlertEndpoint(bg, a.ID, first.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAlertEndpoint(bg, a.ID, first.ID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if all, _ := s.ListAlertEndpoints(bg, a.ID); len(all) != ledger.MaxAlertEndpoints-1 {
		t.Fatalf("after the delete: %d endpoints", len(all))
	}
	MustAlertEndpoint(t, s, a.ID, "https://example.com/again") // room again
}

// testAlertDeliveries: an event fans out to the subscribed endpoints once per event id; claims
// lease, retries wait, marks need the live claim; ended deliveries are kept for AlertKeep and
// listed newest first; deleting an endpoint deletes its deliveries.
func testAlertDeliveries(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	eng.setNow(t, &clock)
	a := MustAccount(t, s, "deliver@example.com")
	all := MustAlertEndpoint(t, s, a.ID, "https://example.com/all")
	clock = clock.Add(time.Millisecond)
	buys := MustAlertEndpoint(t, s, a.ID, "https://example.com/buys", ledger.AlertPurchaseCompleted)
	ev := func(kind, id string) ledger.AlertEvent {
		return ledger.AlertEvent{AccountID: a.ID, Kind: kind, ID: id, Payload: []byte(`{"id":"` + id + `"}`)}
	}
	for _, bad := range []ledger.AlertEvent{ev("nope", "evt_1"), ev(ledger.AlertBalanceLow, ""), {AccountID: a.ID, Kind: ledger.AlertBalanceLow, ID: "evt_x"}} {
		if _, err := s.EnqueueAlertEvent(bg, bad); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Fatalf("event %+v: %v", bad, err)
		}
	}
	if n, err := s.EnqueueAlertEvent(bg, ev(ledger.AlertBalanceLow, "evt_low")); err != nil || n != 1 {
		t.Fatalf("balance.low queued %d, %v; want 1 (one endpoint takes it)", n, err)
	}
	clock = clock.Add(time.Millisecond)
	if n, err := s.EnqueueAlertEvent(bg, ev(ledger.AlertPurchaseCompleted, "evt_buy")); err != nil || n != 2 {
		t.Fatalf("purchase queued %d, %v; want 2", n, err)
	}
	if n, err := s.EnqueueAlertEvent(bg, ev(ledger.AlertPurchaseCompleted, "evt_buy")); err != nil || n != 0 {
		t.Fatalf("the same event again queued %d, %v; want 0", n, err)
	}
	if n, err := s.EnqueueAlertEvent(bg, ledger.AlertEvent{AccountID: "acct_nonenonenonenone00", Kind: ledger.AlertBalanceLow, ID: "e", Payload: []byte("{}")}); err != nil || n != 0 {
		t.Fatalf("event of an account without endpoints: %d, %v", n, err)
	}
	got, err := s.ClaimAlertDeliveries(bg, time.Minute, 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("claim: %+v, %v", got, err)
	}
	low := got[0]
	if low.EventID != "evt_low" || low.EndpointID != all.ID || low.URL != all.URL || string(low.SealedSecret) != string(all.SealedSecret) ||
		low.Attempts != 1 || low.Claim == "" || string(low.Payload) != `{"id":"evt_low"}` || low.State != ledger.AlertPending || low.Kind != ledger.AlertBalanceLow {
		t.Fatalf("claimed %+v", low)
	}
	third, err := s.ClaimAlertDeliveries(bg, time.Minute, 10)
	if err != nil || len(third) != 1 || third[0].EventID != "evt_buy" {
		t.Fatalf("second claim: %+v, %v; want the one not leased", third, err)
	}
	if more, err := s.ClaimAlertDeliveries(bg, time.Minute, 10); err != nil || len(more) != 0 {
		t.Fatalf("all leased, yet claimed %+v, %v", more, err)
	}
	if err := s.MarkAlertDelivered(bg, low.ID, "wrong", 200); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("mark with a wrong claim: %v", err)
	}
	if err := s.MarkAlertDelivered(bg, low.ID, low.Claim, 204); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkAlertDelivered(bg, low.ID, low.Claim, 204); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("second mark: %v", err)
	}
	if err := s.RetryAlertDelivery(bg, got[1].ID, got[1].Claim, clock.Add(10*time.Minute), 500, "HTTP 500"); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * time.Minute) // third's lease ran out; the retried one is not due
	again, err := s.ClaimAlertDeliveries(bg, time.Minute, 10)
	if err != nil || len(again) != 1 || again[0].ID != third[0].ID || again[0].Attempts != 2 {
		t.Fatalf("claim after the lease ran out: %+v, %v", again, err)
	}
	if err := s.GiveUpAlertDelivery(bg, third[0].ID, third[0].Claim, 0, "late"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("give up under an expired claim: %v", err)
	}
	if err := s.GiveUpAlertDelivery(bg, again[0].ID, again[0].Claim, 0, "dial tcp: connection refused"); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(10 * time.Minute)
	retried, err := s.ClaimAlertDeliveries(bg, time.Minute, 10)
	if err != nil || len(retried) != 1 || retried[0].ID != got[1].ID || retried[0].Attempts != 2 || retried[0].LastStatus != 500 || retried[0].LastError != "HTTP 500" {
		t.Fatalf("claim of the retried delivery: %+v, %v", retried, err)
	}
	list, err := s.ListAlertDeliveries(bg, a.ID, 0)
	if err != nil || len(list) != 3 {
		t.Fatalf("listed %+v, %v", list, err)
	}
	states := map[string]ledger.AlertDelivery{}
	for _, d := range list {
		if d.Claim != "" {
			t.Fatalf("listed a claim: %+v", d)
		}
		states[d.ID] = d
	}
	if list[2].ID != low.ID { // the oldest event last
		t.Fatalf("order: %s %s %s", list[0].ID, list[1].ID, list[2].ID)
	}
	if d := states[low.ID]; d.State != ledger.AlertDelivered || d.LastStatus != 204 || d.Finished.IsZero() {
		t.Fatalf("delivered: %+v", d)
	}
	if d := states[third[0].ID]; d.State != ledger.AlertFailed || d.LastError != "dial tcp: connection refused" || d.Attempts != 2 {
		t.Fatalf("given up: %+v", d)
	}
	if d := states[got[1].ID]; d.State != ledger.AlertPending || d.LeaseUntil.IsZero() {
		t.Fatalf("pending: %+v", d)
	}
	if l, err := s.ListAlertDeliveries(bg, a.ID, 1); err != nil || len(l) != 1 {
		t.Fatalf("limit 1: %d, %v", len(l), err)
	}
	if _, err := s.ListAlertDeliveries(bg, a.ID, -1); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("negative limit: %v", err)
	}
	// A week later the ended ones are dropped at the next event; the pending one stays.
	clock = clock.Add(ledger.AlertKeep + time.Hour)
	if _, err := s.EnqueueAlertEvent(bg, ev(ledger.AlertRefundCreated, "evt_refund")); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.ListAlertDeliveries(bg, a.ID, 0); len(l) != 2 || l[0].EventID != "evt_refund" || l[1].ID != got[1].ID {
		t.Fatalf("after a week: %+v", l)
	}
	// Deleting the endpoint deletes its deliveries; its holder's mark finds nothing.
	gone := retried[0].EndpointID
	if err := s.DeleteAlertEndpoint(bg, a.ID, gone); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkAlertDelivered(bg, retried[0].ID, retried[0].Claim, 200); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("mark of a deleted endpoint's delivery: %v", err)
	}
	l, _ := s.ListAlertDeliveries(bg, a.ID, 0)
	for _, d := range l {
		if d.EndpointID == gone {
			t.Fatalf("a delivery of the deleted endpoint is left: %+v", d)
		}
	}
	if want := map[bool]int{true: 0, false: 1}[gone == all.ID]; len(l) != want || buys.ID == "" {
		t.Fatalf("after deleting an endpoint: %+v; want %d", l, want)
	}
}

// testAlertConcurrentClaims: senders claiming at once get each delivery once.
func testAlertConcurrentClaims(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "race@example.com")
	MustAlertEndpoint(t, s, a.ID, "https://example.com/one")
	MustAlertEndpoint(t, s, a.ID, "https://example.com/two")
	const events = 30
	for i := range events {
		if _, err := s.EnqueueAlertEvent(bg, ledger.AlertEvent{AccountID: a.ID, Kind: ledger.AlertPurchaseCompleted, ID: fmt.Sprintf("evt_%d", i), Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for {
				ds, err := s.ClaimAlertDeliveries(bg, time.Hour, 3)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ds) == 0 {
					return
				}
				for _, d := range ds {
					mu.Lock()
					seen[d.ID]++
					mu.Unlock()
					if err := s.MarkAlertDelivered(bg, d.ID, d.Claim, 200); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != 2*events {
		t.Fatalf("claimed %d distinct deliveries of %d", len(seen), 2*events)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("delivery %s claimed %d times", id, c)
		}
	}
}

// testAlertAccountsAndNotes: the accounts a periodic check reads are those with an endpoint
// subscribed to its kinds; a note is taken once until its time has passed, and racing callers
// see one change.
func testAlertAccountsAndNotes(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	eng.setNow(t, &clock)
	a := MustAccount(t, s, "notes-a@example.com")
	b := MustAccount(t, s, "notes-b@example.com")
	c := MustAccount(t, s, "notes-c@example.com")
	MustAlertEndpoint(t, s, a.ID, "https://example.com/a", ledger.AlertKeyBudget80)
	MustAlertEndpoint(t, s, a.ID, "https://example.com/a2")
	MustAlertEndpoint(t, s, b.ID, "https://example.com/b", ledger.AlertPurchaseCompleted)
	MustAlertEndpoint(t, s, c.ID, "https://example.com/c")
	want := []string{a.ID, c.ID}
	slices.Sort(want)
	got, err := s.AlertAccounts(bg, []string{ledger.AlertKeyBudget80, ledger.AlertKeyBudget100}, "", 0)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("accounts with key budget alerts: %v, %v; want %v", got, err, want)
	}
	if got, err := s.AlertAccounts(bg, []string{ledger.AlertKeyBudget80}, want[0], 0); err != nil || !slices.Equal(got, want[1:]) {
		t.Fatalf("after %s: %v, %v", want[0], got, err)
	}
	if got, err := s.AlertAccounts(bg, []string{ledger.AlertKeyBudget80}, "", 1); err != nil || len(got) != 1 {
		t.Fatalf("limit 1: %v, %v", got, err)
	}
	if _, err := s.NoteAlert(bg, a.ID, "", time.Time{}); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("empty note: %v", err)
	}
	until := clock.Add(time.Hour)
	if ok, err := s.NoteAlert(bg, a.ID, "key_1 day 2026-03-01", until); err != nil || !ok {
		t.Fatalf("first note: %v, %v", ok, err)
	}
	if ok, err := s.NoteAlert(bg, a.ID, "key_1 day 2026-03-01", until); err != nil || ok {
		t.Fatalf("second note: %v, %v", ok, err)
	}
	if ok, err := s.NoteAlert(bg, b.ID, "key_1 day 2026-03-01", until); err != nil || !ok {
		t.Fatalf("another account's note: %v, %v", ok, err)
	}
	if ok, err := s.NoteAlert(bg, a.ID, "key_1 total", time.Time{}); err != nil || !ok {
		t.Fatalf("note for good: %v, %v", ok, err)
	}
	clock = clock.Add(2 * time.Hour)
	if ok, err := s.NoteAlert(bg, a.ID, "key_1 day 2026-03-01", clock.Add(time.Hour)); err != nil || !ok {
		t.Fatalf("note past its time: %v, %v; want taken again", ok, err)
	}
	if ok, err := s.NoteAlert(bg, a.ID, "key_1 total", time.Time{}); err != nil || ok {
		t.Fatalf("note for good, again: %v, %v", ok, err)
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ok, err := s.NoteAlert(bg, c.ID, "race", time.Time{})
			if err != nil {
				t.Error(err)
			}
			if ok {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d callers noted one occurrence", wins.Load())
	}
}
