package caddymodule

import (
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/pipeline"
	"github.com/caddy-textgen/textgen/ledger"
)

// The hold's rules (reserve, settle, void, and their retries while the ledger is unavailable)
// are the pipeline's (pipeline.Hold); this file is what the adapter gives them: its metrics.

// retryFirst and retryMax bound the pause between two attempts of a write the ledger could not
// take: the same pace for the kept text's writes (retention.go) as for settles.
const (
	retryFirst = pipeline.RetryFirst
	retryMax   = pipeline.RetryMax
)

// holdMetrics is the pipeline's Observer: the ledger_op_duration, credits_total and holds_open
// metrics.
type holdMetrics struct{}

func (holdMetrics) LedgerOp(op string, d time.Duration) {
	metrics.ledgerOps.WithLabelValues(op).Observe(d.Seconds())
}

func (holdMetrics) Resolved(outcome string, mode ledger.Mode) {
	metrics.credits.WithLabelValues(outcome, string(mode)).Inc()
}

func (holdMetrics) HoldsOpen(delta int) { metrics.holdsOpen.Add(float64(delta)) }

var _ pipeline.Observer = holdMetrics{}
