package account

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/receipts"
	"github.com/caddy-textgen/textgen/caddymodule/internal/sealing"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// TestSignedPurchaseReceipt: with a handler that signs for the ledger (registered as the
// textgen handler does), the receipt page links the signed receipt, whose download verifies with
// the published key list and names what the ledger booked; a changed amount does not verify;
// another account's purchase, a grant and an unknown reference are not found; without a signer
// the page has no link and the download says why.
func TestSignedPurchaseReceipt(t *testing.T) {
	e := newTestEnv(t)
	b := e.browser()
	acct := b.signup("signed@example.com")
	mustGrant(t, e.store, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindPurchase,
		Credits: 50, Reference: "cs_test_signed", Reason: checkoutReason + "50", AmountCents: 900, Currency: "EUR"})
	mustGrant(t, e.store, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindGrant,
		Credits: 5, Reference: "goodwill_s", Reason: "goodwill"})

	// No signer: no link, and the download says why.
	mustNotContain(t, "receipt without a signer", b.get("/account/receipts/cs_test_signed").body, "signed-receipt-link")
	r := b.get("/account/receipts/cs_test_signed/signed")
	expectStatus(t, "signed without a signer", r, http.StatusNotFound)
	mustContain(t, "signed without a signer", r.body, "does not sign receipts")

	sl, err := sealing.New(bytes.Repeat([]byte{5}, 32))
	if err != nil {
		t.Fatal(err)
	}
	sg := receipts.New(e.store, sl)
	defer textgenapp.RegisterReceiptSigner(e.store, sg)()
	mustContain(t, "receipt", b.get("/account/receipts/cs_test_signed").body, `href="/account/receipts/cs_test_signed/signed"`)
	r = b.get("/account/receipts/cs_test_signed/signed")
	expectStatus(t, "signed", r, http.StatusOK)
	if ct, cd := r.header.Get("Content-Type"), r.header.Get("Content-Disposition"); ct != "application/json" || cd != `attachment; filename="receipt-cs_test_signed.json"` {
		t.Fatalf("headers %q %q", ct, cd)
	}
	var sr receipts.Signed
	if err := json.Unmarshal([]byte(r.body), &sr); err != nil {
		t.Fatal(err)
	}
	set, err := sg.PublicKeys(bg) // what GET /.well-known/textgen-receipt-keys serves
	if err != nil {
		t.Fatal(err)
	}
	if err := receipts.Verify(set, sr); err != nil {
		t.Fatalf("the signed purchase receipt: %v", err)
	}
	var p receipts.Purchase
	if err := json.Unmarshal(sr.Receipt, &p); err != nil || p != (receipts.Purchase{Type: "purchase", Reference: "cs_test_signed",
		AccountID: acct.ID, Credits: 50, AmountCents: 900, Currency: "EUR", Time: p.Time}) || p.Time == "" {
		t.Fatalf("receipt %+v %v", p, err)
	}
	p.AmountCents = 90000
	forged, _ := receipts.Canonical(p)
	if err := receipts.Verify(set, receipts.Signed{Receipt: forged, Signature: sr.Signature, KeyID: sr.KeyID}); err == nil {
		t.Fatal("a receipt with another amount verifies")
	}

	other := e.browser()
	other.signup("other-signed@example.com")
	for _, c := range []struct {
		b    *browser
		path string
	}{{b, "/account/receipts/goodwill_s/signed"}, {b, "/account/receipts/cs_test_nothing/signed"}, {other, "/account/receipts/cs_test_signed/signed"}} {
		r := c.b.get(c.path)
		expectStatus(t, c.path, r, http.StatusNotFound)
		mustNotContain(t, c.path, r.body, "signature")
	}
	if anon := e.browser().get("/account/receipts/cs_test_signed/signed"); anon.status != http.StatusSeeOther {
		t.Fatalf("logged out: %d", anon.status)
	}
}

// TestUsageByKey: the dashboard's table and the CSV break the account's use down by key, each
// key by its name and last 4 characters, with its generations per tool; another account's use
// is not there.
func TestUsageByKey(t *testing.T) {
	e := newTestEnv(t)
	b := e.browser()
	acct := b.signup("bykey@example.com")
	mustGrant(t, e.store, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 20})
	var keys []ledger.Key
	for _, name := range []string{"Backend", "=Laptop"} {
		_, k, err := e.store.CreateKey(bg, acct.ID, ledger.Live, name, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	use := func(acctID, key, rid, tool string, charge bool) {
		if _, err := e.store.Hold(bg, ledger.HoldRequest{AccountID: acctID, Mode: ledger.Live, RequestID: rid, KeyID: key, Tool: tool}); err != nil {
			t.Fatal(err)
		}
		var err error
		if charge {
			_, err = e.store.Settle(bg, acctID, rid)
		} else {
			_, err = e.store.Void(bg, acctID, rid, "backend_error")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	use(acct.ID, keys[0].ID, "r1", "summarizer", true)
	use(acct.ID, keys[0].ID, "r2", "summarizer", true)
	use(acct.ID, keys[0].ID, "r3", "translator", false)
	use(acct.ID, keys[1].ID, "r4", "translator", true)
	other := e.browser()
	oa := other.signup("bykey-other@example.com")
	mustGrant(t, e.store, ledger.GrantRequest{AccountID: oa.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 5})
	use(oa.ID, keys[0].ID, "r5", "grammar-fixer", true)

	dash := b.get("/account/").body
	mustContain(t, "dashboard", dash, `id="usage-by-key"`, "Backend <code>…"+keys[0].Last4+"</code>", "summarizer 2, translator 1",
		"=Laptop <code>…"+keys[1].Last4+"</code>", "translator 1", `href="/account/usage-by-key.csv"`)
	mustNotContain(t, "dashboard", dash, "grammar-fixer")

	r := b.get("/account/usage-by-key.csv")
	expectStatus(t, "usage by key CSV", r, http.StatusOK)
	if ct, cd := r.header.Get("Content-Type"), r.header.Get("Content-Disposition"); ct != "text/csv; charset=utf-8" || !strings.HasPrefix(cd, `attachment; filename="usage-by-key-`) {
		t.Fatalf("headers %q %q", ct, cd)
	}
	recs, err := csv.NewReader(strings.NewReader(r.body)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, rec := range recs[1:] {
		got[rec[0]+"/"+rec[4]] = strings.Join(rec, ",")
	}
	want := map[string]string{
		keys[0].ID + "/summarizer": keys[0].ID + ",Backend," + keys[0].Last4 + ",live,summarizer,2,2,0",
		keys[0].ID + "/translator": keys[0].ID + ",Backend," + keys[0].Last4 + ",live,translator,1,0,1",
		keys[1].ID + "/translator": keys[1].ID + ",'=Laptop," + keys[1].Last4 + ",live,translator,1,1,0",
	}
	if strings.Join(recs[0], ",") != strings.Join(keyUsageColumns, ",") || len(got) != len(want) {
		t.Fatalf("CSV:\n%s", r.body)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("row %s: %q, want %q", k, got[k], w)
		}
	}
	if anon := e.browser().get("/account/usage-by-key.csv"); anon.status != http.StatusSeeOther {
		t.Fatalf("logged out: %d", anon.status)
	}
}
