package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

func testIdempotencyRecords(t *testing.T, eng engine) {
	t0 := time.Date(2030, 2, 2, 0, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a := MustAccount(t, s, "i@example.com").ID

	rec := ledger.IdempotencyRecord{AccountID: a, Key: "k1", RequestID: "req1", Fingerprint: "fp1"}
	got, isNew, err := s.BeginIdempotent(bg, rec)
	if err != nil || !isNew || !got.Created.Equal(t0) || got.Status != 0 || got.RequestID != "req1" {
		t.Fatalf("begin: %+v %v %v", got, isNew, err)
	}
	again, isNew, err := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: "k1", RequestID: "req2", Fingerprint: "fp2"})
	if err != nil || isNew || again != got {
		t.Fatalf("second begin: %+v %v %v", again, isNew, err)
	}
	if err := s.FinishIdempotent(bg, a, "k1", 200); err != nil {
		t.Fatal(err)
	}
	again, isNew, err = s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: "k1", RequestID: "req3"})
	if err != nil || isNew || again.Status != 200 || again.RequestID != "req1" {
		t.Fatalf("begin after finish: %+v %v %v", again, isNew, err)
	}
	// Keys are per account.
	b := MustAccount(t, s, "i2@example.com").ID
	if _, isNew, err := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: b, Key: "k1"}); err != nil || !isNew {
		t.Fatalf("same key on another account: %v %v", isNew, err)
	}

	WantErr(t, s.FinishIdempotent(bg, a, "nope", 200), ledger.ErrNotFound)
	WantErr(t, s.FinishIdempotent(bg, a, "k1", 42), ledger.ErrInvalidArgument)
	_, _, err = s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a})
	WantErr(t, err, ledger.ErrInvalidArgument)
	_, _, err = s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: "acct_missing", Key: "k"})
	WantErr(t, err, ledger.ErrNotFound)

	// After 24 h the key is free again.
	t0 = t0.Add(ledger.IdempotencyTTL)
	if got, isNew, err := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: "k1", RequestID: "req4"}); err != nil || !isNew || got.RequestID != "req4" {
		t.Fatalf("begin after 24 h: %+v %v %v", got, isNew, err)
	}
}

// testIdempotencyReleaseAndTakeOver: a request that ended without effect releases its key, and a
// record left "in progress" by a crash is taken over once no request can still be running.
func testIdempotencyReleaseAndTakeOver(t *testing.T, eng engine) {
	t0 := time.Date(2030, 3, 3, 0, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a := MustAccount(t, s, "r@example.com").ID

	if _, isNew, err := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: "k", RequestID: "req1", Fingerprint: "fp"}); err != nil || !isNew {
		t.Fatal(isNew, err)
	}
	if err := s.FinishIdempotent(bg, a, "k", ledger.StatusReleased); err != nil {
		t.Fatal(err)
	}
	got, isNew, err := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: "k", RequestID: "req2", Fingerprint: "fp"})
	if err != nil || !isNew || got.RequestID != "req2" || got.Status != 0 {
		t.Fatalf("begin after release: %+v %v %v", got, isNew, err)
	}

	// req2 "crashes" in progress: within the hold TTL its key stays taken, after it is free.
	t0 = t0.Add(ledger.DefaultHoldTTL - time.Second)
	if got, isNew, _ := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: "k", RequestID: "req3"}); isNew || got.RequestID != "req2" {
		t.Fatalf("in progress within the TTL was taken over: %+v", got)
	}
	t0 = t0.Add(2 * time.Second)
	if got, isNew, _ := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: "k", RequestID: "req4"}); !isNew || got.RequestID != "req4" {
		t.Fatalf("abandoned record not taken over: %+v", got)
	}

	// A record carries the TTL of its request's hold: a short one frees the key sooner, a long
	// one later, than the store's default.
	for _, c := range []struct {
		key string
		ttl time.Duration
	}{{"short", time.Minute}, {"long", 3 * ledger.DefaultHoldTTL}} {
		if _, isNew, err := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: c.key, RequestID: c.key + "1", HoldTTL: c.ttl}); err != nil || !isNew {
			t.Fatal(isNew, err)
		}
	}
	t0 = t0.Add(2 * time.Minute)
	if _, isNew, _ := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: "short", RequestID: "short2"}); !isNew {
		t.Fatal("a record past its own one-minute TTL was not taken over")
	}
	t0 = t0.Add(2 * ledger.DefaultHoldTTL)
	if got, isNew, _ := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: "long", RequestID: "long2"}); isNew || got.RequestID != "long1" {
		t.Fatalf("a record within its own TTL (3x the default) was taken over: %+v", got)
	}
	if _, _, err := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: "neg", RequestID: "n", HoldTTL: -1}); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("negative HoldTTL: %v, want ErrInvalidArgument", err)
	}

	// A finished record is never taken over before its 24 h.
	if err := s.FinishIdempotent(bg, a, "k", 200); err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(ledger.DefaultHoldTTL * 2)
	if got, isNew, _ := s.BeginIdempotent(bg, ledger.IdempotencyRecord{AccountID: a, Key: "k", RequestID: "req5"}); isNew || got.Status != 200 || got.RequestID != "req4" {
		t.Fatalf("finished record taken over: %+v", got)
	}
}
