package ledgertest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// testGenerations: a kept generation is stored chunk by chunk, read back from any chunk on,
// scoped to its account, gone for readers at its expiry and deleted by the sweep, and the store
// holds nothing of it afterwards.
func testGenerations(t *testing.T, eng engine) {
	t0 := time.Date(2030, 4, 4, 0, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a := MustAccount(t, s, "g@example.com").ID
	b := MustAccount(t, s, "g2@example.com").ID
	const marker = "ciphertext-marker-"

	rec := ledger.GenerationRecord{AccountID: a, RequestID: "req_gen1", Mode: ledger.Live, Tool: "summarizer", Language: "de",
		State: ledger.GenerationRunning, Created: t0, Expires: t0.Add(15 * time.Minute), Pieces: 2, Bytes: 10}
	if err := PutGeneration(s, rec, 0, [][]byte{[]byte(marker + "0")}); err != nil {
		t.Fatal(err)
	}
	got, chunks, err := s.GetGeneration(bg, a, "req_gen1", 0)
	if err != nil || got.Chunks != 1 || got.State != ledger.GenerationRunning || len(chunks) != 1 || string(chunks[0]) != marker+"0" {
		t.Fatalf("after the first put: %+v %q %v", got, chunks, err)
	}
	if !got.Created.Equal(t0) || !got.Expires.Equal(t0.Add(15*time.Minute)) || got.Tool != "summarizer" || got.Language != "de" || got.Mode != ledger.Live || !got.Finished.IsZero() {
		t.Fatalf("record read back: %+v", got)
	}
	// The one writer appends and finishes.
	rec.State, rec.Finished, rec.OutputTokens, rec.Pieces, rec.Bytes, rec.FinishReason = ledger.GenerationCompleted, t0.Add(time.Second), 24, 5, 40, "length"
	if err := PutGeneration(s, rec, 1, [][]byte{[]byte(marker + "1"), []byte(marker + "2")}); err != nil {
		t.Fatal(err)
	}
	got, chunks, err = s.GetGeneration(bg, a, "req_gen1", 0)
	if err != nil || got.Chunks != 3 || got.State != ledger.GenerationCompleted || got.OutputTokens != 24 || got.Pieces != 5 || got.Bytes != 40 ||
		got.FinishReason != "length" ||
		!got.Finished.Equal(t0.Add(time.Second)) || len(chunks) != 3 || !bytes.Equal(chunks[2], []byte(marker+"2")) {
		t.Fatalf("after the final put: %+v %q %v", got, chunks, err)
	}
	if _, chunks, err = s.GetGeneration(bg, a, "req_gen1", 2); err != nil || len(chunks) != 1 || string(chunks[0]) != marker+"2" {
		t.Fatalf("from chunk 2: %q %v", chunks, err)
	}
	if _, chunks, err = s.GetGeneration(bg, a, "req_gen1", 3); err != nil || len(chunks) != 0 {
		t.Fatalf("from past the end: %q %v", chunks, err)
	}
	// Another account, an unknown id, a bad argument.
	_, _, err = s.GetGeneration(bg, b, "req_gen1", 0)
	WantErr(t, err, ledger.ErrNotFound)
	_, _, err = s.GetGeneration(bg, a, "req_nope", 0)
	WantErr(t, err, ledger.ErrNotFound)
	_, _, err = s.GetGeneration(bg, a, "req_gen1", -1)
	WantErr(t, err, ledger.ErrInvalidArgument)
	WantErr(t, PutGeneration(s, ledger.GenerationRecord{AccountID: "acct_missing", RequestID: "r", Mode: ledger.Live, State: ledger.GenerationRunning, Expires: t0.Add(time.Minute)}, 0, nil), ledger.ErrNotFound)
	bad := rec
	bad.Expires = t0
	WantErr(t, PutGeneration(s, bad, 0, nil), ledger.ErrInvalidArgument)
	bad = rec
	bad.State = "done"
	WantErr(t, PutGeneration(s, bad, 0, nil), ledger.ErrInvalidArgument)
	bad = rec
	bad.FinishReason = "tired"
	WantErr(t, PutGeneration(s, bad, 0, nil), ledger.ErrInvalidArgument)
	WantErr(t, PutGeneration(s, rec, 3, [][]byte{{}}), ledger.ErrInvalidArgument)
	WantErr(t, PutGeneration(s, rec, 3, [][]byte{make([]byte, ledger.MaxGenerationChunk+1)}), ledger.ErrInvalidArgument)
	var tooMany [][]byte
	for range ledger.MaxGenerationPut/ledger.MaxGenerationChunk + 1 {
		tooMany = append(tooMany, make([]byte, ledger.MaxGenerationChunk))
	}
	WantErr(t, PutGeneration(s, rec, 3, tooMany), ledger.ErrInvalidArgument)
	// The store still works after the refusals.
	if _, _, err := s.GetGeneration(bg, a, "req_gen1", 0); err != nil {
		t.Fatalf("after refused puts: %v", err)
	}

	// A second generation that lives longer, and one deleted at once (not charged).
	long := ledger.GenerationRecord{AccountID: a, RequestID: "req_gen2", Mode: ledger.Test, State: ledger.GenerationRunning, Created: t0, Expires: t0.Add(time.Hour)}
	if err := PutGeneration(s, long, 0, [][]byte{[]byte(marker + "long")}); err != nil {
		t.Fatal(err)
	}
	gone := ledger.GenerationRecord{AccountID: b, RequestID: "req_gen3", Mode: ledger.Live, State: ledger.GenerationRunning, Created: t0, Expires: t0.Add(time.Hour)}
	if err := PutGeneration(s, gone, 0, [][]byte{[]byte(marker + "void")}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteGeneration(bg, b, "req_gen3"); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.GetGeneration(bg, b, "req_gen3", 0)
	WantErr(t, err, ledger.ErrNotFound)
	if err := s.DeleteGeneration(bg, b, "req_gen3"); err != nil {
		t.Fatalf("deleting twice: %v", err)
	}
	assertNotStored(t, eng, s, marker+"void")

	// At the end of its window the first is gone for readers, before any sweep.
	t0 = t0.Add(15 * time.Minute)
	_, _, err = s.GetGeneration(bg, a, "req_gen1", 0)
	WantErr(t, err, ledger.ErrNotFound)
	if _, _, err := s.GetGeneration(bg, a, "req_gen2", 0); err != nil {
		t.Fatalf("the longer window ended early: %v", err)
	}
	n, err := s.DeleteExpiredGenerations(bg)
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	assertNotStored(t, eng, s, marker+"0", marker+"1", marker+"2", "req_gen1")
	if _, _, err := s.GetGeneration(bg, a, "req_gen2", 0); err != nil {
		t.Fatalf("the sweep took the longer window too: %v", err)
	}
	t0 = t0.Add(time.Hour)
	if n, err := s.DeleteExpiredGenerations(bg); err != nil || n != 1 {
		t.Fatalf("second sweep: %d %v", n, err)
	}
	assertNotStored(t, eng, s, marker)
}

// testGenerationsMany: many chunks of many generations, swept in one go.
func testGenerationsMany(t *testing.T, eng engine) {
	t0 := time.Date(2030, 4, 5, 0, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a := MustAccount(t, s, "gm@example.com").ID
	for g := 0; g < 20; g++ {
		rec := ledger.GenerationRecord{AccountID: a, RequestID: fmt.Sprintf("req_m%02d", g), Mode: ledger.Live, State: ledger.GenerationRunning, Created: t0, Expires: t0.Add(time.Minute)}
		for c := 0; c < 30; c += 10 {
			var chunks [][]byte
			for i := 0; i < 10; i++ {
				chunks = append(chunks, []byte(fmt.Sprintf("chunk-%d-%d", g, c+i)))
			}
			if err := PutGeneration(s, rec, c, chunks); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, chunks, err := s.GetGeneration(bg, a, "req_m07", 25)
	if err != nil || len(chunks) != 5 || string(chunks[0]) != "chunk-7-25" || string(chunks[4]) != "chunk-7-29" {
		t.Fatalf("chunks 25..29: %q %v", chunks, err)
	}
	t0 = t0.Add(time.Minute)
	if n, err := s.DeleteExpiredGenerations(bg); err != nil || n != 20 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	assertNotStored(t, eng, s, "chunk-")

	// Several generations in one call: all stored, in order; one bad put stores none of them.
	batch := func(ids ...string) []ledger.GenerationPut {
		var puts []ledger.GenerationPut
		for _, id := range ids {
			rec := ledger.GenerationRecord{AccountID: a, RequestID: id, Mode: ledger.Live, State: ledger.GenerationRunning, Created: t0, Expires: t0.Add(time.Minute)}
			puts = append(puts, ledger.GenerationPut{Record: rec, Chunks: [][]byte{[]byte("batch-" + id + "-0")}},
				ledger.GenerationPut{Record: rec, First: 1, Chunks: [][]byte{[]byte("batch-" + id + "-1")}})
		}
		return puts
	}
	bad := batch("req_b3", "req_b4")
	bad[3].Record.Expires = t0 // not in the future
	WantErr(t, s.PutGenerations(bg, bad...), ledger.ErrInvalidArgument)
	unknown := batch("req_b5")
	unknown[1].Record.AccountID = "acct_nosuchaccount000"
	WantErr(t, s.PutGenerations(bg, unknown...), ledger.ErrNotFound)
	for _, id := range []string{"req_b3", "req_b4", "req_b5"} {
		_, _, err := s.GetGeneration(bg, a, id, 0)
		WantErr(t, err, ledger.ErrNotFound)
	}
	if err := s.PutGenerations(bg, batch("req_b1", "req_b2")...); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"req_b1", "req_b2"} {
		rec, chunks, err := s.GetGeneration(bg, a, id, 0)
		if err != nil || rec.Chunks != 2 || len(chunks) != 2 || string(chunks[1]) != "batch-"+id+"-1" {
			t.Fatalf("%s from one call: %+v %q %v", id, rec, chunks, err)
		}
	}

	// The final put moves the window's end earlier than the running one's: the sweep goes by
	// the last put, and counts the generation once.
	rec := ledger.GenerationRecord{AccountID: a, RequestID: "req_moved", Mode: ledger.Live, State: ledger.GenerationRunning, Created: t0, Expires: t0.Add(time.Hour)}
	if err := PutGeneration(s, rec, 0, [][]byte{[]byte("moved-0")}); err != nil {
		t.Fatal(err)
	}
	rec.State, rec.Finished, rec.Expires = ledger.GenerationCompleted, t0, t0.Add(time.Minute)
	if err := PutGeneration(s, rec, 1, [][]byte{[]byte("moved-1")}); err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(time.Minute)
	if n, err := s.DeleteExpiredGenerations(bg); err != nil || n != 3 {
		t.Fatalf("sweep at the moved end: %d %v, want it and the two of one call", n, err)
	}
	_, _, err = s.GetGeneration(bg, a, "req_moved", 0)
	WantErr(t, err, ledger.ErrNotFound)
	assertNotStored(t, eng, s, "moved-")
	t0 = t0.Add(time.Hour)
	if n, err := s.DeleteExpiredGenerations(bg); err != nil || n != 0 {
		t.Fatalf("sweep at the first end: %d %v, want nothing left", n, err)
	}
}

// testGetHold: a hold is found by its account and request id, open, settled or voided, and
// never through another account.
func testGetHold(t *testing.T, eng engine) {
	t0 := time.Date(2030, 4, 6, 0, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a := MustAccount(t, s, "h@example.com").ID
	b := MustAccount(t, s, "h2@example.com").ID
	MustGrant(t, s, a, ledger.Live, 2)
	if _, err := s.Reserve(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "req_h1", KeyID: "k1", Tool: "summarizer"}); err != nil {
		t.Fatal(err)
	}
	h, err := s.GetHold(bg, a, "req_h1")
	if err != nil || h.State != ledger.HoldOpen || h.Tool != "summarizer" || h.KeyID != "k1" || h.Mode != ledger.Live || !h.Created.Equal(t0) || !h.Resolved.IsZero() {
		t.Fatalf("open hold: %+v %v", h, err)
	}
	t0 = t0.Add(time.Second)
	if _, err := s.Settle(bg, a, "req_h1"); err != nil {
		t.Fatal(err)
	}
	if h, err = s.GetHold(bg, a, "req_h1"); err != nil || h.State != ledger.HoldSettled || !h.Resolved.Equal(t0) {
		t.Fatalf("settled hold: %+v %v", h, err)
	}
	if _, err := s.Hold(bg, ledger.HoldRequest{AccountID: a, Mode: ledger.Live, RequestID: "req_h2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Void(bg, a, "req_h2", "backend down"); err != nil {
		t.Fatal(err)
	}
	if h, err = s.GetHold(bg, a, "req_h2"); err != nil || h.State != ledger.HoldVoided || h.Reason != "backend down" {
		t.Fatalf("voided hold: %+v %v", h, err)
	}
	_, err = s.GetHold(bg, b, "req_h1")
	WantErr(t, err, ledger.ErrNotFound)
	_, err = s.GetHold(bg, a, "req_none")
	WantErr(t, err, ledger.ErrNotFound)
	_, err = s.GetHold(bg, "acct_missing", "req_h1")
	WantErr(t, err, ledger.ErrNotFound)
	_, err = s.GetHold(bg, a, "")
	WantErr(t, err, ledger.ErrInvalidArgument)
}

// PutGeneration is one put of PutGenerations.
func PutGeneration(s ledger.Store, rec ledger.GenerationRecord, first int, chunks [][]byte) error {
	return s.PutGenerations(bg, ledger.GenerationPut{Record: rec, First: first, Chunks: chunks})
}
