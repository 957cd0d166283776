package caddymodule

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// deadlineRecorder is a response writer that records the write deadlines set through its
// http.ResponseController.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	set []time.Time
}

func (r *deadlineRecorder) SetWriteDeadline(d time.Time) error {
	r.set = append(r.set, d)
	return nil
}

// A piece's write deadline is WriteTimeout from now, never later than the generation's end; one
// armed less than a tenth of WriteTimeout earlier is kept rather than set again for every piece,
// and one later than wanted is never kept. (That a stalled client is cut by it, on a real
// connection: TestStalledReaderTimesOut.)
func TestWriteDeadlineArmedOnce(t *testing.T) {
	const timeout = time.Minute
	rec := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
	s := &streamer{rc: http.NewResponseController(rec), timeout: timeout}

	s.deadline(time.Time{})
	s.deadline(time.Time{})
	s.deadline(time.Time{})
	if len(rec.set) != 1 {
		t.Fatalf("%d deadlines set for three writes within a tenth of the timeout, want 1", len(rec.set))
	}
	if d := time.Until(rec.set[0]); d <= timeout*9/10 || d > timeout {
		t.Errorf("deadline %v from now, want within WriteTimeout %v", d, timeout)
	}

	end := time.Now().Add(timeout / 2) // the generation ends sooner: the deadline tightens
	s.deadline(end)
	if len(rec.set) != 2 || !rec.set[1].Equal(end) {
		t.Fatalf("deadlines %v, want the generation's end %v last", rec.set, end)
	}
	s.deadline(end)
	if len(rec.set) != 2 {
		t.Errorf("the same end set again: %v", rec.set)
	}

	// Armed more than a tenth of WriteTimeout earlier: set anew.
	s.armed = time.Now().Add(timeout * 8 / 10)
	s.deadline(time.Time{})
	if len(rec.set) != 3 || time.Until(rec.set[2]) <= timeout*9/10 {
		t.Errorf("deadlines %v, want a new one WriteTimeout from now", rec.set)
	}

	s.started = true
	s.close()
	s.deadline(time.Time{})
	if n := len(rec.set); n != 5 || !rec.set[3].IsZero() {
		t.Errorf("deadlines %v, want the cleared one, then a new one", rec.set)
	}
}
