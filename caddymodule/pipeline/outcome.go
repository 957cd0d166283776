package pipeline

import (
	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/ledger"
)

// Stream is what the stream stage found once the model's answer ended.
type Stream struct {
	// Err is why the answer ended early: the model's error, a write to the client that failed,
	// or a prompt the model server cut (which is not an answer to the whole input). Nil: the
	// model finished.
	Err error
	// Texted: a piece of text was handed to the client's writer.
	Texted bool
	// Delivered: a piece reached the client's connection (a write and its flush succeeded).
	Delivered bool
	// Detached: the client left after text was delivered and the generation ran on for its
	// kept text.
	Detached bool
	// ClientLeft: a write to the client failed or the client's request ended.
	ClientLeft bool
}

// End is how the answer to the client ends.
type End int

const (
	// EndComplete: the whole text went out; the answer ends normally (SSE: its done event).
	EndComplete End = iota
	// EndClientGone: the client left; nothing more is written.
	EndClientGone
	// EndEmpty: the model finished without a piece of text; answered as the model's error.
	EndEmpty
	// EndBroken: text went out and the generation broke: a plain answer is aborted (no client
	// may take a cut text for a whole one), an SSE stream ends with an error event.
	EndBroken
	// EndFailed: the generation failed before any text; answered with Err's error.
	EndFailed
)

// Decision is the outcome of one generation: what is charged and how its answer ends.
type Decision struct {
	// Charge: the held credit is settled (charged); otherwise it is voided with VoidReason.
	Charge     bool
	VoidReason string
	End        End
	// Kind is the failure's kind (Err's), for the answer and the log.
	Kind backends.Kind
	// ModelFailed: the model (not the client's leaving) ended the answer early; counted as a
	// backend error.
	ModelFailed bool
}

// Decide applies the charging rules to what the stream found. A credit is charged when the text
// was complete, or when the client left after text was delivered to it (it has what it paid
// for, unless the prompt was cut: a cut prompt is never charged, whoever still listens).
// Everything else gives the credit back.
func Decide(s Stream) Decision {
	kind := backends.KindOf(s.Err)
	// Only the client's leaving (not our own deadline) lets a cut-off generation be charged. A
	// detached generation ran on after its client left.
	clientGone := s.Detached || s.Err != nil && s.ClientLeft
	d := Decision{Kind: kind, ModelFailed: s.Err != nil && !clientGone}
	cut := s.Err != nil && kind == backends.KindTooLong
	switch {
	case s.Err == nil && s.Texted, clientGone && s.Delivered && !cut:
		d.Charge = true
		d.End = EndComplete
		if clientGone {
			d.End = EndClientGone
		}
	case s.Err == nil:
		d.VoidReason, d.End = "empty output", EndEmpty
	case s.Texted && !clientGone:
		d.VoidReason, d.End = "interrupted: "+kind.String(), EndBroken
	default:
		d.VoidReason, d.End = kind.String(), EndFailed
		if clientGone {
			d.End = EndClientGone
		}
	}
	return d
}

// KeepText is what becomes of a generation's kept text once it is charged or not: discarded
// when nothing was charged (or it outgrew what is kept), else kept as completed (with why its
// answer ended) or interrupted (err: the stream's Err).
func KeepText(charged, overflow bool, err error, doneReason string) (discard bool, state ledger.GenerationState, reason string) {
	if !charged || overflow {
		return true, "", ""
	}
	if err != nil {
		return false, ledger.GenerationInterrupted, ""
	}
	return false, ledger.GenerationCompleted, FinishReason(doneReason)
}

// FinishReason is why a complete answer ended, from the model's done reason: "length" when it
// reached the tool's max_output_tokens, else "stop".
func FinishReason(doneReason string) string {
	if doneReason == "length" {
		return "length"
	}
	return "stop"
}
