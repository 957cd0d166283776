package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// balanceFails is a ledger whose key and balance lookup fails, as the real one's does after a failed disk
// write (a fault it cannot be driven into from outside its package); everything else is real.
type balanceFails struct{ ledger.Store }

func (balanceFails) LookupKeyBalance(context.Context, string) (ledger.Key, ledger.Account, ledger.Balance, error) {
	return ledger.Key{}, ledger.Account{}, ledger.Balance{}, errors.New("disk on fire")
}

// balanceUnavailable is a ledger whose key and balance lookup reports ErrUnavailable, as a PostgreSQL ledger
// does while its database is unreachable.
type balanceUnavailable struct{ ledger.Store }

func (balanceUnavailable) LookupKeyBalance(context.Context, string) (ledger.Key, ledger.Account, ledger.Balance, error) {
	return ledger.Key{}, ledger.Account{}, ledger.Balance{}, fmt.Errorf("%w: database down", ledger.ErrUnavailable)
}

// TestCheckKeyLedgerFailure: a ledger that cannot tell the credits is an internal error, never
// "insufficient credits, buy a package" for a customer who has them.
func TestCheckKeyLedgerFailure(t *testing.T) {
	store, err := badgerledger.Open("", badgerledger.Options{InMemory: true, SweepInterval: -1, GCInterval: -1, LastUsedFlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	acct, err := store.CreateAccount(ctx, "fails@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Grant(ctx, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 3}); err != nil {
		t.Fatal(err)
	}
	full, _, err := store.CreateKey(ctx, acct.ID, ledger.Live, "k", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/api/v1/generate", nil)
	req.Header.Set("X-API-Key", full)

	h := &Handler{logger: zap.NewNop()}
	if kc, e := h.checkKey(store, httptest.NewRecorder(), req, "req_ok", true); e != nil || kc.available != 3 || kc.acct.ID != acct.ID {
		t.Fatalf("healthy ledger: %+v %v, want 3 available", kc, e)
	}
	if _, e := h.checkKey(balanceFails{store}, httptest.NewRecorder(), req, "req_fail", true); e != errInternal {
		t.Fatalf("failing ledger: %v, want %v", e, errInternal)
	}
	if _, e := h.checkKey(balanceUnavailable{store}, httptest.NewRecorder(), req, "req_down", true); e != errLedgerUnavailable {
		t.Fatalf("unavailable ledger: %v, want %v", e, errLedgerUnavailable)
	}
}
