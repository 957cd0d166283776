package ledger

import "testing"

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
	WantErr(t, err, ErrClosed)
	_, err = s.Hold(bg, HoldRequest{AccountID: a.ID, Mode: Live, RequestID: "r"})
	WantErr(t, err, ErrClosed)
	_, err = s.GetAccount(bg, a.ID)
	WantErr(t, err, ErrClosed)
	_, _, err = s.LookupKey(bg, NewFullKey(Live))
	WantErr(t, err, ErrClosed)
	_, err = s.Purchase(bg, a.ID, "cs_1")
	WantErr(t, err, ErrClosed)
	_, err = s.Verify(bg)
	WantErr(t, err, ErrClosed)
	_, _, err = s.RecordUnmatchedPayment(bg, UnmatchedPayment{Reference: "cs_1", Currency: "eur", Problem: ProblemUnknownPackage})
	WantErr(t, err, ErrClosed)
	_, err = s.UnmatchedPayments(bg, false, 0)
	WantErr(t, err, ErrClosed)
	_, _, err = s.ResolveUnmatchedPayment(bg, "cs_1", "refunded")
	WantErr(t, err, ErrClosed)
	_, err = s.ListMail(bg, 0)
	WantErr(t, err, ErrClosed)
	err = s.DropMail(bg, "mail_0000000000000000closed00")
	WantErr(t, err, ErrClosed)
	_, err = s.LowBalanceChanges(bg, 0)
	WantErr(t, err, ErrClosed)
}
