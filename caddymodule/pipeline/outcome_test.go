package pipeline_test

import (
	"errors"
	"testing"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/pipeline"
	"github.com/caddy-textgen/textgen/ledger"
)

// TestDecide is the charging rules as a table: what the stream found, what is charged and how
// the answer ends.
func TestDecide(t *testing.T) {
	broke := &backends.Error{Kind: backends.KindInterrupted, Err: errors.New("runner crashed")}
	canceled := &backends.Error{Kind: backends.KindCanceled, Err: errors.New("write failed")}
	cut := &backends.Error{Kind: backends.KindTooLong, Pieces: 3, Err: errors.New("prompt cut")}
	refused := &backends.Error{Kind: backends.KindUnavailable, Err: errors.New("connection refused")}
	cases := []struct {
		name        string
		s           pipeline.Stream
		charge      bool
		end         pipeline.End
		voidReason  string
		modelFailed bool
	}{
		{"complete", pipeline.Stream{Texted: true, Delivered: true}, true, pipeline.EndComplete, "", false},
		{"complete, the client left after its last piece", pipeline.Stream{Texted: true, Delivered: true, ClientLeft: true}, true, pipeline.EndComplete, "", false},
		{"no text", pipeline.Stream{}, false, pipeline.EndEmpty, "empty output", false},
		{"broke after text", pipeline.Stream{Err: broke, Texted: true, Delivered: true}, false, pipeline.EndBroken, "interrupted: interrupted", true},
		{"failed before text", pipeline.Stream{Err: refused}, false, pipeline.EndFailed, "unavailable", true},
		{"client left after delivered text", pipeline.Stream{Err: canceled, Texted: true, Delivered: true, ClientLeft: true}, true, pipeline.EndClientGone, "", false},
		{"client left before text reached it", pipeline.Stream{Err: canceled, Texted: true, ClientLeft: true}, false, pipeline.EndClientGone, "canceled", false},
		{"client left before any text", pipeline.Stream{Err: canceled, ClientLeft: true}, false, pipeline.EndClientGone, "canceled", false},
		{"detached, ran on to its end", pipeline.Stream{Texted: true, Delivered: true, Detached: true}, true, pipeline.EndClientGone, "", false},
		{"detached, broke later", pipeline.Stream{Err: broke, Texted: true, Delivered: true, Detached: true}, true, pipeline.EndClientGone, "", false},
		{"prompt cut, client stayed", pipeline.Stream{Err: cut, Texted: true, Delivered: true}, false, pipeline.EndBroken, "interrupted: too_long", true},
		{"prompt cut, client left", pipeline.Stream{Err: cut, Texted: true, Delivered: true, ClientLeft: true}, false, pipeline.EndClientGone, "too_long", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := pipeline.Decide(c.s)
			if d.Charge != c.charge || d.End != c.end || d.VoidReason != c.voidReason || d.ModelFailed != c.modelFailed {
				t.Errorf("Decide(%+v) = %+v; want charge %v, end %v, void reason %q, model failed %v",
					c.s, d, c.charge, c.end, c.voidReason, c.modelFailed)
			}
		})
	}
}

// TestKeepText: a kept text stays only when it was charged and whole.
func TestKeepText(t *testing.T) {
	broke := errors.New("broke")
	cases := []struct {
		name              string
		charged, overflow bool
		err               error
		done              string
		discard           bool
		state             ledger.GenerationState
		reason            string
	}{
		{"charged, complete", true, false, nil, "stop", false, ledger.GenerationCompleted, "stop"},
		{"charged, at max_output_tokens", true, false, nil, "length", false, ledger.GenerationCompleted, "length"},
		{"charged, interrupted", true, false, broke, "", false, ledger.GenerationInterrupted, ""},
		{"not charged", false, false, nil, "stop", true, "", ""},
		{"outgrew what is kept", true, true, nil, "stop", true, "", ""},
	}
	for _, c := range cases {
		discard, state, reason := pipeline.KeepText(c.charged, c.overflow, c.err, c.done)
		if discard != c.discard || state != c.state || reason != c.reason {
			t.Errorf("%s: KeepText = %v, %q, %q; want %v, %q, %q", c.name, discard, state, reason, c.discard, c.state, c.reason)
		}
	}
}
