package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/caddy-textgen/textgen/caddymodule/pipeline"
	"github.com/caddy-textgen/textgen/ledger"
)

// faultUnavailableCredits is a fake for a fault the Badger ledger cannot be made to give on
// demand: its settles and voids fail with ErrUnavailable the first n times (a database that
// restarts), then go to the real ledger.
type faultUnavailableCredits struct {
	ledger.Credits
	mu sync.Mutex
	n  int
}

func (f *faultUnavailableCredits) unavailable() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		return nil
	}
	f.n--
	return fmt.Errorf("the database restarts: %w", ledger.ErrUnavailable)
}

func (f *faultUnavailableCredits) SettleDecided(ctx context.Context, accountID, requestID string, decided time.Time) (ledger.HoldResult, error) {
	if err := f.unavailable(); err != nil {
		return ledger.HoldResult{}, err
	}
	return f.Credits.SettleDecided(ctx, accountID, requestID, decided)
}

func (f *faultUnavailableCredits) Void(ctx context.Context, accountID, requestID, reason string) (ledger.HoldResult, error) {
	if err := f.unavailable(); err != nil {
		return ledger.HoldResult{}, err
	}
	return f.Credits.Void(ctx, accountID, requestID, reason)
}

// TestResolvedLaterWhileLedgerUnavailable: a settle or void the ledger cannot take now is taken
// (the charge stands) and reaches the ledger once it is back, once.
func TestResolvedLaterWhileLedgerUnavailable(t *testing.T) {
	for _, settle := range []bool{true, false} {
		name, want, outcome := "void", ledger.HoldVoided, "voided"
		if settle {
			name, want, outcome = "settle", ledger.HoldSettled, "settled"
		}
		t.Run(name, func(t *testing.T) {
			store, acct := openLedger(t, 2)
			credits := &faultUnavailableCredits{Credits: store, n: 2}
			obs := newCountingObserver()
			ctx := context.Background()
			req := ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: "req_later_" + name, TTL: time.Minute}
			hold, err := pipeline.Reserve(ctx, credits, req, zaptest.NewLogger(t), obs)
			if err != nil {
				t.Fatal(err)
			}
			var taken bool
			if settle {
				taken = hold.Settle(ctx)
			} else {
				taken = hold.Void(ctx, "test")
			}
			if !taken || hold.Open() {
				t.Fatalf("taken %v, open %v; want taken (later) and no longer open", taken, hold.Open())
			}
			// The retries run in the background; a minute is a safety net, not a measure.
			deadline := time.Now().Add(time.Minute)
			for {
				info, err := store.GetHold(ctx, acct, req.RequestID)
				if err != nil {
					t.Fatal(err)
				}
				if info.State == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("hold still %s; want %s once the ledger is back", info.State, want)
				}
				time.Sleep(50 * time.Millisecond)
			}
			for {
				obs.mu.Lock()
				n := obs.resolved[outcome]
				obs.mu.Unlock()
				if n == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the observer was told of %d %s holds; want 1", n, outcome)
				}
				time.Sleep(50 * time.Millisecond)
			}
			b, err := store.Balance(ctx, acct)
			wantBalance := int64(2)
			if settle {
				wantBalance = 1
			}
			if err != nil || b.Balance != wantBalance || b.Available != wantBalance {
				t.Errorf("Balance = %+v, %v; want balance and available %d", b, err, wantBalance)
			}
		})
	}
}
