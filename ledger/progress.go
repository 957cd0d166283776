package ledger

import "context"

// Progress of the calls that read the whole ledger (Verify, Export and a copy built on it): a
// caller that shows an operator how far such a call has come passes a ProgressFunc; the engines
// only call it, and never print.

// ProgressFunc is told how far a long call has come: done of total units (the call says which:
// accounts, records); total is -1 while it is not known. It is called on the call's goroutine,
// as often as once a unit, so it must return quickly, and must not call the store.
type ProgressFunc func(done, total int64)

// ProgressVerifier is a store whose Verify can say how far it has come.
type ProgressVerifier interface {
	// VerifyProgress is Verify that calls progress (when not nil) with the accounts verified of
	// the accounts the store has: once before the first, then as it goes. An account that only
	// a damaged record names counts too, so done may pass total.
	VerifyProgress(ctx context.Context, progress ProgressFunc) (VerifyReport, error)
}

// VerifyWithProgress runs s's Verify, through VerifyProgress when s has it (a store that does
// not is verified without progress).
func VerifyWithProgress(ctx context.Context, s Maintenance, progress ProgressFunc) (VerifyReport, error) {
	if pv, ok := s.(ProgressVerifier); ok && progress != nil {
		return pv.VerifyProgress(ctx, progress)
	}
	return s.Verify(ctx)
}

// ExportProgressSink is an ExportSink that is told how far the Export has come: done of the
// total records it gives, Account to Audit (records an Export passes over, such as expired
// sessions, count as given). An exporter that can count them calls ExportProgress once it
// knows the total, then as it goes; counting may cost it a read of the records' keys.
type ExportProgressSink interface {
	ExportSink
	ExportProgress(done, total int64)
}
