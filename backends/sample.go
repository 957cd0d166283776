package backends

import (
	"context"
	"time"
)

// Sample is the backend of test keys: it never calls a model and streams the given pieces, a
// fixed and clearly marked sample text, so client code can be written and tested at no cost.
type Sample struct {
	Pieces []string
}

// Generate emits the pieces in order. It fails with KindCanceled when ctx ends or emit fails.
func (s Sample) Generate(ctx context.Context, req Request, emit Emit) (Stats, error) {
	start := time.Now()
	st := Stats{Host: "test-mode", DoneReason: "stop"}
	for i, p := range s.Pieces {
		if err := ctx.Err(); err != nil {
			return st, &Error{Kind: KindCanceled, Pieces: i, Err: err}
		}
		if err := emit(p); err != nil {
			return st, &Error{Kind: KindCanceled, Pieces: i, Err: err}
		}
		if i == 0 {
			st.TimeToFirst = time.Since(start)
		}
		st.Pieces++
		st.OutputTokens++
	}
	if req.Flush != nil { // every piece was there at once
		if err := req.Flush(); err != nil {
			return st, &Error{Kind: KindCanceled, Pieces: st.Pieces, Err: err}
		}
	}
	st.Total = time.Since(start)
	return st, nil
}

// Interface guards
var _ Backend = Sample{}
