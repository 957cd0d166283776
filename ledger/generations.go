package ledger

import (
	"fmt"
	"time"
)

// The rules of kept generations, for every engine (badgerledger/generations.go,
// pgledger/generations.go store them). The ledger keeps what the caller gives it: the handler
// encrypts the text before it reaches the store, so an engine only ever sees ciphertext, and a
// record's metadata (tool, language, sizes, times) but never a word of the text or the input.

// GenerationState is how far a kept generation got.
type GenerationState string

const (
	// GenerationRunning: the model is still producing text (or its instance died; the record
	// then expires with its window).
	GenerationRunning GenerationState = "running"
	// GenerationCompleted: the model finished; the kept text is the whole text.
	GenerationCompleted GenerationState = "completed"
	// GenerationInterrupted: the generation was charged (text had been delivered) but the model
	// stopped before its end; the kept text is what it produced.
	GenerationInterrupted GenerationState = "interrupted"
)

// GenerationRecord describes one kept generation: (AccountID, RequestID) names it, and its
// chunks (the encrypted pieces of its text, numbered from 0) are stored with it.
type GenerationRecord struct {
	AccountID string          `json:"account_id"`
	RequestID string          `json:"request_id"`
	Mode      Mode            `json:"mode"`
	Tool      string          `json:"tool,omitempty"`
	Language  string          `json:"language,omitempty"`
	State     GenerationState `json:"state"`
	Created   time.Time       `json:"created"`
	// Finished is when the generation ended; zero while it runs.
	Finished time.Time `json:"finished,omitzero"`
	// Expires ends the retention window: from then on the record and its chunks are gone for
	// every reader, and the next sweep deletes them.
	Expires      time.Time `json:"expires"`
	OutputTokens int       `json:"output_tokens,omitempty"`
	// FinishReason is why a completed generation's answer ended: "stop" (the model finished it)
	// or "length" (it reached its output budget); "" while it runs or when it was interrupted.
	FinishReason string `json:"finish_reason,omitempty"`
	// Pieces and Bytes count the pieces and bytes of text in the stored chunks (the caller's
	// figures: the store cannot read the chunks).
	Pieces int   `json:"pieces"`
	Bytes  int64 `json:"bytes"`
	// Chunks is the number of chunks stored; the store sets it.
	Chunks int `json:"chunks"`
}

// GenerationPut is one step of a generation's keeping: its record as it now is, and its chunks
// from number First on (Generations.PutGenerations).
type GenerationPut struct {
	Record GenerationRecord
	First  int
	Chunks [][]byte
	// TextSHA256, given with the put that ends a charged generation, is the SHA-256 digest of
	// its whole text: the store keeps it for good (Receipts.ReceiptDigest), past the window. A
	// digest already stored for the request id stays as it is.
	TextSHA256 []byte
	// NewID says that the caller made the request id for this generation and sends the same
	// TextSHA256 with every retry of its last put, so that no other digest can be stored under
	// it: the store may write the digest without looking for one first (as HoldRequest.NewID).
	NewID bool
}

// Bounds of kept generations.
const (
	// MaxGenerationChunk bounds one chunk's size.
	MaxGenerationChunk = 64 << 10
	// MaxGenerationPut bounds the chunks of one put together, so that one put stays within one
	// small commit (a Badger transaction has a size limit).
	MaxGenerationPut   = 256 << 10
	maxGenerationLabel = 64
)

// CheckGenerationPuts checks what PutGenerations is given at time t.
func CheckGenerationPuts(puts []GenerationPut, t time.Time) error {
	for _, p := range puts {
		if err := checkGenerationRecord(p.Record, p.First, p.Chunks, t); err != nil {
			return err
		}
		if err := checkTextDigest(p.TextSHA256); err != nil {
			return err
		}
	}
	return nil
}

// checkGenerationRecord checks one put at time t.
func checkGenerationRecord(rec GenerationRecord, first int, chunks [][]byte, t time.Time) error {
	if err := CheckString("request id", rec.RequestID, maxRequestIDLen, true); err != nil {
		return err
	}
	if err := checkMode(rec.Mode); err != nil {
		return err
	}
	if err := CheckString("tool", rec.Tool, maxGenerationLabel, false); err != nil {
		return err
	}
	if err := CheckString("language", rec.Language, maxGenerationLabel, false); err != nil {
		return err
	}
	switch rec.State {
	case GenerationRunning, GenerationCompleted, GenerationInterrupted:
	default:
		return fmt.Errorf("generation state %q: %w", rec.State, ErrInvalidArgument)
	}
	switch rec.FinishReason {
	case "", "stop", "length":
	default:
		return fmt.Errorf("generation finish reason %q: %w", rec.FinishReason, ErrInvalidArgument)
	}
	if !rec.Expires.After(t) {
		return fmt.Errorf("generation expiry %v is not in the future: %w", rec.Expires, ErrInvalidArgument)
	}
	if first < 0 || rec.Pieces < 0 || rec.Bytes < 0 || rec.OutputTokens < 0 {
		return fmt.Errorf("generation figures must not be negative: %w", ErrInvalidArgument)
	}
	total := 0
	for _, c := range chunks {
		if len(c) == 0 || len(c) > MaxGenerationChunk {
			return fmt.Errorf("a generation chunk must have 1 to %d bytes: %w", MaxGenerationChunk, ErrInvalidArgument)
		}
		total += len(c)
	}
	if total > MaxGenerationPut {
		return fmt.Errorf("the chunks of one put have %d bytes, more than %d: %w", total, MaxGenerationPut, ErrInvalidArgument)
	}
	return nil
}

// GenerationExpired reports whether rec's window has ended at t.
func GenerationExpired(rec GenerationRecord, t time.Time) bool { return !t.Before(rec.Expires) }
