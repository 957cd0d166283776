package pipeline_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/pipeline"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// countingObserver counts what the pipeline reports (the adapter's metrics).
type countingObserver struct {
	mu       sync.Mutex
	ops      map[string]int
	resolved map[string]int
	open     int
}

func newCountingObserver() *countingObserver {
	return &countingObserver{ops: map[string]int{}, resolved: map[string]int{}}
}

func (o *countingObserver) LedgerOp(op string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ops[op]++
}

func (o *countingObserver) Resolved(outcome string, _ ledger.Mode) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.resolved[outcome]++
}

func (o *countingObserver) HoldsOpen(delta int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.open += delta
}

// openLedger opens a Badger ledger on disk with an account of credits live credits.
func openLedger(t *testing.T, credits int64) (*badgerledger.Badger, string) {
	t.Helper()
	store, err := badgerledger.Open(filepath.Join(t.TempDir(), "ledger"), badgerledger.Options{Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	acct, err := store.CreateAccount(context.Background(), "pipeline@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Grant(context.Background(), ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindGrant,
		Credits: credits, Reference: "pipeline-test"}); err != nil {
		t.Fatal(err)
	}
	return store, acct.ID
}

// TestChargingAgainstFaults runs the hold, the model (the fault server, for answers the real
// Ollama cannot be made to give on demand), the outcome and the resolution against a Badger
// ledger on disk, and checks what the ledger charged.
func TestChargingAgainstFaults(t *testing.T) {
	cases := []struct {
		name string
		cfg  ollamatest.FaultConfig
		// leaveAfter: the client's writes fail from this piece on (0: never).
		leaveAfter int
		charged    bool
		end        pipeline.End
	}{
		{name: "complete", cfg: ollamatest.FaultConfig{Pieces: 5}, charged: true, end: pipeline.EndComplete},
		{name: "error line after 3 pieces", cfg: ollamatest.FaultConfig{Mode: ollamatest.FaultErrorAfter, Pieces: 3, Message: "runner crashed"},
			end: pipeline.EndBroken},
		{name: "error before any piece", cfg: ollamatest.FaultConfig{Mode: ollamatest.FaultStatus, Status: http.StatusInternalServerError, Message: "bad"},
			end: pipeline.EndFailed},
		{name: "dropped after 2 pieces", cfg: ollamatest.FaultConfig{Mode: ollamatest.FaultDrop, Pieces: 2}, end: pipeline.EndBroken},
		{name: "client leaves after 2 pieces", cfg: ollamatest.FaultConfig{Pieces: 5}, leaveAfter: 3, charged: true, end: pipeline.EndClientGone},
		{name: "client leaves at the first piece", cfg: ollamatest.FaultConfig{Pieces: 5}, leaveAfter: 1, end: pipeline.EndClientGone},
	}
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{})
	chat, err := backends.NewChat(backends.ChatConfig{Hosts: []string{fs.URL}, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { chat.Close() })
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a safety net, not an assertion
			defer cancel()
			fs.Set(c.cfg)
			store, acct := openLedger(t, 3)
			obs := newCountingObserver()
			req := ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: "req_" + filepath.Base(t.Name()), Tool: "summarizer", TTL: time.Minute}
			hold, err := pipeline.Reserve(ctx, store, req, zaptest.NewLogger(t), obs)
			if err != nil {
				t.Fatal(err)
			}
			if !hold.Open() || hold.Available != 2 {
				t.Fatalf("after Reserve: open %v, available %d; want open, 2", hold.Open(), hold.Available)
			}
			// The client: it takes each piece (delivered) until it leaves (its write fails).
			var s pipeline.Stream
			pieces := 0
			emit := func(string) error {
				pieces++
				if c.leaveAfter > 0 && pieces >= c.leaveAfter {
					s.ClientLeft = true
					return errors.New("the client's connection is closed")
				}
				s.Texted, s.Delivered = true, true
				return nil
			}
			_, s.Err = chat.Generate(ctx, backends.Request{Model: ollamatest.DefaultModel, System: "sys", Prompt: "hi"}, emit)
			d := pipeline.Decide(s)
			if d.Charge != c.charged || d.End != c.end {
				t.Fatalf("Decide(%+v) = %+v; want charge %v, end %v", s, d, c.charged, c.end)
			}
			var taken bool
			if d.Charge {
				taken = hold.Settle(ctx)
			} else {
				taken = hold.Void(ctx, d.VoidReason)
			}
			if !taken || hold.Open() {
				t.Fatalf("resolution taken %v, hold open %v; want taken and closed", taken, hold.Open())
			}
			wantState, wantAvailable, wantBalance := ledger.HoldVoided, int64(3), int64(3)
			if c.charged {
				wantState, wantAvailable, wantBalance = ledger.HoldSettled, 2, 2
			}
			info, err := store.GetHold(ctx, acct, req.RequestID)
			if err != nil || info.State != wantState {
				t.Fatalf("GetHold = %+v, %v; want state %s", info, err, wantState)
			}
			b, err := store.Balance(ctx, acct)
			if err != nil || b.Balance != wantBalance || b.Available != wantAvailable || hold.Available != wantAvailable {
				t.Fatalf("Balance = %+v, %v, hold says available %d; want balance %d, available %d", b, err, hold.Available, wantBalance, wantAvailable)
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			outcome := "voided"
			if c.charged {
				outcome = "settled"
			}
			if obs.open != 0 || obs.resolved[outcome] != 1 || obs.ops["reserve"] != 1 {
				t.Errorf("observer: open %d, resolved %v, ops %v; want 0 open, one %s, one reserve", obs.open, obs.resolved, obs.ops, outcome)
			}
		})
	}
}

// TestReserveRefused: no credit, no hold; the ledger's error is the caller's to answer.
func TestReserveRefused(t *testing.T) {
	store, acct := openLedger(t, 1)
	ctx := context.Background()
	log, obs := zaptest.NewLogger(t), newCountingObserver()
	first, err := pipeline.Reserve(ctx, store, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: "req_first", TTL: time.Minute}, log, obs)
	if err != nil || first.Available != 0 {
		t.Fatalf("first Reserve: available %d, %v; want 0, nil", first.Available, err)
	}
	second, err := pipeline.Reserve(ctx, store, ledger.HoldRequest{AccountID: acct, Mode: ledger.Live, RequestID: "req_second", TTL: time.Minute}, log, obs)
	if !errors.Is(err, ledger.ErrInsufficientCredits) || second.Open() {
		t.Fatalf("second Reserve: open %v, %v; want ErrInsufficientCredits", second.Open(), err)
	}
	if obs.open != 1 {
		t.Errorf("holds open %d; want 1 (the first)", obs.open)
	}
}

// TestIdempotencyKeyClaims: a key's first request runs; a retry while it runs, with another
// body, or after it was charged does not; after it charged nothing, the retry runs.
func TestIdempotencyKeyClaims(t *testing.T) {
	store, acct := openLedger(t, 1)
	ctx := context.Background()
	log := zaptest.NewLogger(t)
	rec := func(key, requestID, body string) ledger.IdempotencyRecord {
		return ledger.IdempotencyRecord{AccountID: acct, Key: key, RequestID: requestID, Fingerprint: body, Created: time.Now(), HoldTTL: time.Minute}
	}
	claim := func(r ledger.IdempotencyRecord, want pipeline.ClaimResult) ledger.IdempotencyRecord {
		t.Helper()
		got, prior, err := pipeline.Claim(ctx, store, r)
		if err != nil || got != want {
			t.Fatalf("Claim(%s by %s) = %v, %+v, %v; want %v", r.Key, r.RequestID, got, prior, err, want)
		}
		return prior
	}
	claim(rec("live:a", "req_first", "body"), pipeline.Claimed)
	if prior := claim(rec("live:a", "req_second", "body"), pipeline.ClaimRunning); !pipeline.Replayable(prior) || prior.RequestID != "req_first" {
		t.Errorf("while the first runs: %+v; want its record, replayable", prior)
	}
	claim(rec("live:a", "req_other", "another body"), pipeline.ClaimReused)
	pipeline.FinishIdempotent(ctx, store, log, "req_first", acct, "live:a", true)
	if prior := claim(rec("live:a", "req_third", "body"), pipeline.ClaimCharged); prior.Status != http.StatusOK || prior.RequestID != "req_first" || !pipeline.Replayable(prior) {
		t.Errorf("after the first was charged: %+v; want its record with 200, replayable", prior)
	}

	claim(rec("live:b", "req_free", "body"), pipeline.Claimed)
	pipeline.FinishIdempotent(ctx, store, log, "req_free", acct, "live:b", false)
	claim(rec("live:b", "req_retry", "body"), pipeline.Claimed)
}
