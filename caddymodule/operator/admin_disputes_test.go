package operator

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// TestAdminAccountDisputes: the admin API's account view (what `caddy textgen account get`
// prints) marks an account whose purchase is disputed, with the dispute's id, reason, amount and
// credits, on a Badger ledger on disk; a won dispute is listed but no longer marks it, a lost
// one does; an account without disputes is not marked.
func TestAdminAccountDisputes(t *testing.T) {
	ctx := context.Background()
	dir := adminLedger(t)
	ref, err := textgenapp.AcquireLedger(dir, badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Release() })
	store, err := ref.Get()
	if err != nil {
		t.Fatal(err)
	}
	acct, _ := store.CreateAccount(ctx, "disputed-admin@example.com")
	clean, _ := store.CreateAccount(ctx, "clean-admin@example.com")
	for _, cs := range []string{"cs_adm_1", "cs_adm_2"} {
		if _, err := store.Grant(ctx, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindPurchase, Credits: 10,
			Reference: cs, Reason: "Stripe Checkout, package 10", AmountCents: 200, Currency: "EUR"}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.RecordPayment(ctx, ledger.Payment{ID: "pi_" + cs, Reference: cs, AccountID: acct.ID, Package: "10",
			Credits: 10, AmountCents: 200, Currency: "eur", Status: ledger.PaymentPaid}); err != nil {
			t.Fatal(err)
		}
	}
	dispute := func(id, cs, status string) {
		t.Helper()
		if _, err := store.Reverse(ctx, ledger.ReversalRequest{ID: id, Kind: ledger.ReversalDispute, Payment: "pi_" + cs,
			AmountCents: 200, Currency: "eur", Status: status, Reason: "fraudulent"}); err != nil {
			t.Fatal(err)
		}
	}
	view := func(id string) map[string]any {
		t.Helper()
		w, d := adminDo(t, dir, "GET", "/textgen/accounts/"+id, "")
		wantStatus(t, w, http.StatusOK, "")
		return d
	}
	if d := view(clean.ID); d["disputed"] != false || len(d["disputes"].([]any)) != 0 {
		t.Fatalf("an account without disputes: disputed %v, disputes %v", d["disputed"], d["disputes"])
	}
	dispute("du_adm_1", "cs_adm_1", ledger.DisputeOpen)
	d := view(acct.ID)
	ds := d["disputes"].([]any)
	first, _ := ds[0].(map[string]any)
	if d["disputed"] != true || len(ds) != 1 || first["id"] != "du_adm_1" || first["reason"] != "fraudulent" ||
		first["amount_cents"] != float64(200) || first["status"] != "open" || first["credits"] != float64(10) || first["reference"] != "cs_adm_1" {
		t.Fatalf("an account with an open dispute: %v", d)
	}
	dispute("du_adm_1", "cs_adm_1", ledger.DisputeWon)
	if d := view(acct.ID); d["disputed"] != false || !strings.Contains(strings.Join(statuses(d), ","), "won") {
		t.Fatalf("an account whose dispute was won: %v", d)
	}
	dispute("du_adm_2", "cs_adm_2", ledger.DisputeOpen)
	dispute("du_adm_2", "cs_adm_2", ledger.DisputeLost)
	if d := view(acct.ID); d["disputed"] != true || strings.Join(statuses(d), ",") != "lost,won" {
		t.Fatalf("an account with a lost dispute: %v", d)
	}
}

// statuses are the statuses of an account view's disputes, in its order.
func statuses(d map[string]any) []string {
	var out []string
	for _, x := range d["disputes"].([]any) {
		out = append(out, x.(map[string]any)["status"].(string))
	}
	return out
}
