package ledgertest

import (
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
)

// testClosed: after Close every call fails with ErrClosed, and a second Close is no error.
func testClosed(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	a := MustAccount(t, s, "c@example.com")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err := s.CreateAccount(bg, "d@example.com")
	WantErr(t, err, ledger.ErrClosed)
	_, err = s.Hold(bg, ledger.HoldRequest{AccountID: a.ID, Mode: ledger.Live, RequestID: "r"})
	WantErr(t, err, ledger.ErrClosed)
	_, err = s.GetAccount(bg, a.ID)
	WantErr(t, err, ledger.ErrClosed)
	_, _, err = s.LookupKey(bg, ledger.NewFullKey(ledger.Live))
	WantErr(t, err, ledger.ErrClosed)
	_, err = s.Purchase(bg, a.ID, "cs_1")
	WantErr(t, err, ledger.ErrClosed)
	_, err = s.Verify(bg)
	WantErr(t, err, ledger.ErrClosed)
	_, _, err = s.RecordUnmatchedPayment(bg, ledger.UnmatchedPayment{Reference: "cs_1", Currency: "eur", Problem: ledger.ProblemUnknownPackage})
	WantErr(t, err, ledger.ErrClosed)
	_, err = s.UnmatchedPayments(bg, false, 0)
	WantErr(t, err, ledger.ErrClosed)
	_, _, err = s.ResolveUnmatchedPayment(bg, "cs_1", "refunded")
	WantErr(t, err, ledger.ErrClosed)
	_, err = s.ListMail(bg, 0)
	WantErr(t, err, ledger.ErrClosed)
	err = s.DropMail(bg, "mail_0000000000000000closed00")
	WantErr(t, err, ledger.ErrClosed)
	_, err = s.LowBalanceChanges(bg, 0)
	WantErr(t, err, ledger.ErrClosed)
}
