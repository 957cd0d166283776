package ledgertest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// testReceiptKeys: the first key is stored once, whoever adds it; a rotation retires the
// current key at the new one's start and keeps it listed; a key that is not sealed or is
// malformed is refused.
func testReceiptKeys(t *testing.T, eng engine) {
	t0 := time.Date(2030, 5, 5, 0, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	if keys := MustReceiptKeys(t, s); len(keys) != 0 {
		t.Fatalf("a new ledger has receipt keys: %+v", keys)
	}
	k1 := SampleReceiptKey(t, "rk_one")
	got, err := s.AddReceiptKey(bg, k1, false)
	if err != nil || got.ID != "rk_one" || !got.ValidFrom.Equal(t0) || !got.ValidUntil.IsZero() || !bytes.Equal(got.PublicKey, k1.PublicKey) {
		t.Fatalf("the first key: %+v %v", got, err)
	}
	// Without rotate, a second key is not stored: the caller gets the current one.
	t0 = t0.Add(time.Minute)
	if got, err := s.AddReceiptKey(bg, SampleReceiptKey(t, "rk_two"), false); err != nil || got.ID != "rk_one" {
		t.Fatalf("a second first key: %+v %v", got, err)
	}
	if keys := MustReceiptKeys(t, s); len(keys) != 1 || !bytes.Equal(keys[0].SealedPrivateKey, k1.SealedPrivateKey) {
		t.Fatalf("keys after a second first key: %+v", keys)
	}
	// A rotation.
	t1 := t0
	k3 := SampleReceiptKey(t, "rk_three")
	if got, err := s.AddReceiptKey(bg, k3, true); err != nil || got.ID != "rk_three" || !got.ValidFrom.Equal(t1) {
		t.Fatalf("rotation: %+v %v", got, err)
	}
	t0 = t0.Add(time.Minute)
	keys := MustReceiptKeys(t, s)
	if len(keys) != 2 || keys[0].ID != "rk_one" || !keys[0].ValidUntil.Equal(t1) || keys[1].ID != "rk_three" || !keys[1].ValidUntil.IsZero() {
		t.Fatalf("keys after the rotation: %+v", keys)
	}
	// Refused: a taken id, a private key in clear, a short public key.
	_, err = s.AddReceiptKey(bg, SampleReceiptKey(t, "rk_one"), true)
	WantErr(t, err, ledger.ErrInvalidArgument)
	clear := k3
	clear.ID = "rk_clear"
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	clear.SealedPrivateKey = priv
	_, err = s.AddReceiptKey(bg, clear, true)
	WantErr(t, err, ledger.ErrInvalidArgument)
	short := SampleReceiptKey(t, "rk_short")
	short.PublicKey = short.PublicKey[:31]
	_, err = s.AddReceiptKey(bg, short, true)
	WantErr(t, err, ledger.ErrInvalidArgument)
	_, err = s.AddReceiptKey(bg, SampleReceiptKey(t, ""), true)
	WantErr(t, err, ledger.ErrInvalidArgument)
	if keys := MustReceiptKeys(t, s); len(keys) != 2 {
		t.Fatalf("refused keys were stored: %+v", keys)
	}
}

// testReceiptKeysConcurrent: instances that start together on a new ledger agree on one key.
func testReceiptKeysConcurrent(t *testing.T, eng engine) {
	t0 := time.Date(2030, 5, 5, 0, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	const n = 8
	got := make([]ledger.ReceiptKey, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		k := SampleReceiptKey(t, fmt.Sprintf("rk_racer%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = s.AddReceiptKey(bg, k, false)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || got[i].ID != got[0].ID {
			t.Fatalf("racer %d: %+v %v; racer 0 got %s", i, got[i], errs[i], got[0].ID)
		}
	}
	if keys := MustReceiptKeys(t, s); len(keys) != 1 || keys[0].ID != got[0].ID {
		t.Fatalf("keys after the race: %+v", keys)
	}
}

// testReceiptDigests: the digest given with a generation's last put is kept for good, after the
// generation's window and its sweep, for its account only, once.
func testReceiptDigests(t *testing.T, eng engine) {
	t0 := time.Date(2030, 5, 5, 0, 0, 0, 0, time.UTC)
	eng.setNow(t, &t0)
	s := eng.open(t, 0)
	a := MustAccount(t, s, "rd@example.com").ID
	b := MustAccount(t, s, "rd2@example.com").ID
	rec := ledger.GenerationRecord{AccountID: a, RequestID: "req_dig1", Mode: ledger.Live, Tool: "summarizer", State: ledger.GenerationRunning,
		Created: t0, Expires: t0.Add(time.Minute), Pieces: 1, Bytes: 5}
	if err := PutGeneration(s, rec, 0, [][]byte{[]byte("c0")}); err != nil {
		t.Fatal(err)
	}
	_, err := s.ReceiptDigest(bg, a, "req_dig1")
	WantErr(t, err, ledger.ErrNotFound) // no digest while it runs
	sum := sha256.Sum256([]byte("hello"))
	rec.State, rec.Finished = ledger.GenerationCompleted, t0
	if err := s.PutGenerations(bg, ledger.GenerationPut{Record: rec, First: 1, TextSHA256: sum[:]}); err != nil {
		t.Fatal(err)
	}
	// A repeated last put (a retry) changes nothing.
	other := sha256.Sum256([]byte("other"))
	if err := s.PutGenerations(bg, ledger.GenerationPut{Record: rec, First: 1, TextSHA256: other[:]}); err != nil {
		t.Fatal(err)
	}
	t0 = t0.Add(2 * time.Minute)
	if _, err := s.DeleteExpiredGenerations(bg); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.GetGeneration(bg, a, "req_dig1", 0)
	WantErr(t, err, ledger.ErrNotFound)
	if d, err := s.ReceiptDigest(bg, a, "req_dig1"); err != nil || !bytes.Equal(d, sum[:]) {
		t.Fatalf("the digest after the window: %x %v", d, err)
	}
	_, err = s.ReceiptDigest(bg, b, "req_dig1")
	WantErr(t, err, ledger.ErrNotFound)
	_, err = s.ReceiptDigest(bg, a, "req_nope")
	WantErr(t, err, ledger.ErrNotFound)
	rec.RequestID, rec.Expires = "req_dig2", t0.Add(time.Minute)
	WantErr(t, s.PutGenerations(bg, ledger.GenerationPut{Record: rec, TextSHA256: sum[:31]}), ledger.ErrInvalidArgument)

	// A last put of a request id its caller made (NewID), as the handler's is, and its retry:
	// the digest is stored once, as it was sent, beside the other account's.
	rec.RequestID, rec.Finished = "req_dig3", t0
	for range 2 {
		if err := s.PutGenerations(bg, ledger.GenerationPut{Record: rec, TextSHA256: other[:], NewID: true}); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := s.ReceiptDigest(bg, a, "req_dig3"); err != nil || !bytes.Equal(d, other[:]) {
		t.Fatalf("the digest of a put with NewID and its retry: %x %v, want %x", d, err, other)
	}
	if d, err := s.ReceiptDigest(bg, a, "req_dig1"); err != nil || !bytes.Equal(d, sum[:]) {
		t.Fatalf("another generation's digest after a put with NewID: %x %v", d, err)
	}
}

// SampleReceiptKey is a key as the handler gives it: the private half sealed (here: random bytes
// of a sealed key's length).
func SampleReceiptKey(t testing.TB, id string) ledger.ReceiptKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sealed := make([]byte, 12+ed25519.PrivateKeySize+16)
	_, _ = rand.Read(sealed)
	return ledger.ReceiptKey{ID: id, PublicKey: pub, SealedPrivateKey: sealed}
}

// MustReceiptKeys lists the receipt signing keys, failing the test on an error.
func MustReceiptKeys(t testing.TB, s ledger.Receipts) []ledger.ReceiptKey {
	t.Helper()
	keys, err := s.ReceiptKeys(bg)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// PutDigest stores a completed generation of acct with a text digest.
func PutDigest(t testing.TB, s ledger.Store, acct, rid string, t0 time.Time) {
	t.Helper()
	sum := sha256.Sum256([]byte(rid))
	rec := ledger.GenerationRecord{AccountID: acct, RequestID: rid, Mode: ledger.Live, Tool: "summarizer", State: ledger.GenerationCompleted,
		Created: t0, Finished: t0, Expires: t0.Add(time.Hour)}
	if err := s.PutGenerations(bg, ledger.GenerationPut{Record: rec, TextSHA256: sum[:]}); err != nil {
		t.Fatal(err)
	}
}
