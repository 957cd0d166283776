// Package pipeline holds the charging rules of one generation, free of Caddy and of HTTP, so
// that every door to the model (POST /api/v1/generate today) runs the same stages and the rules
// can be read and tested without a server:
//
//   - the Idempotency-Key (Claim): a retry of a request that ran or runs does not run again;
//   - the hold (Reserve): one credit reserved before the model is asked;
//   - the outcome (Decide): from what the stream found, whether the credit is charged or given
//     back and how the answer ends;
//   - the resolution (Hold.Settle, Hold.Void): the ledger takes the decision now, or later in
//     the background while it is unavailable, never twice;
//   - the kept text (KeepText) and the Idempotency-Key's record (FinishIdempotent), which
//     follow the charge.
//
// The adapter (package caddymodule) reads the HTTP request into these stages' inputs and writes
// their results as the HTTP answer; it alone knows statuses, headers and error bodies.
package pipeline
