package caddymodule

import (
	"context"
	"github.com/caddy-textgen/textgen/caddymodule/internal/apitest"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/ledger"
)

// scrape reads Caddy's metrics endpoint (the test site's "handle /metrics { metrics }") into
// series -> value, the series written as Prometheus prints it: name{label="value",...}.
func scrape(t *testing.T, e *env) map[string]float64 {
	t.Helper()
	resp := e.get("/metrics", "")
	defer resp.Body.Close()
	return parseMetrics(t, resp)
}

// TestMetricsCountKnownTraffic sends a known mix of requests and checks what the metrics
// endpoint counts for it. The collectors live for the process (other tests count too), so the
// test compares the counts before and after.
func TestMetricsCountKnownTraffic(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "tok "})
	e := newEnv(t, envOptions{ollama: fs.URL,
		site:   "handle /metrics {\n\t\tmetrics\n\t}",
		limits: "rate_limit key 3/1h\n\t\trate_limit account off",
		// A model the server does not have: 502 backend_error, kind model_missing.
		extra: "tool email-writer {\n\t\t\tmodel missing\n\t\t}"})
	before := scrape(t, e)
	acct, key := e.account(10)
	acct2, key2 := e.account(10)

	e.generateOK(key)
	e.generateOK(key)
	if resp, _ := e.post(context.Background(), key, genBody("poem-writer", "x", "en", "")); resp.StatusCode != 400 {
		t.Fatalf("unknown tool: %d", resp.StatusCode)
	}
	e.expect429(key, "summarizer", "rate_limited") // the 400 counted against the key too
	if resp, _ := e.post(context.Background(), "tg_live_nope", genBody("summarizer", "x", "en", "")); resp.StatusCode != 401 {
		t.Fatalf("bad key: %d", resp.StatusCode)
	}
	resp, err := e.post(context.Background(), key2, genBody("email-writer", "x", "en", ""))
	if err != nil || resp.StatusCode != 502 {
		t.Fatalf("missing model: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	if e.balance(acct.ID).Balance != 8 || e.balance(acct2.ID).Balance != 10 {
		t.Fatalf("balances %+v %+v", e.balance(acct.ID), e.balance(acct2.ID))
	}

	after := scrape(t, e)
	for series, want := range map[string]float64{
		`caddy_textgen_requests_total{code="200",tool="summarizer"}`:           2,
		`caddy_textgen_requests_total{code="400",tool="none"}`:                 1,
		`caddy_textgen_requests_total{code="429",tool="summarizer"}`:           1,
		`caddy_textgen_requests_total{code="401",tool="none"}`:                 1,
		`caddy_textgen_requests_total{code="502",tool="email-writer"}`:         1,
		`caddy_textgen_credits_total{mode="live",outcome="settled"}`:           2,
		`caddy_textgen_credits_total{mode="live",outcome="voided"}`:            1,
		`caddy_textgen_holds_open`:                                             0,
		`caddy_textgen_output_tokens_total{tool="summarizer"}`:                 6,
		`caddy_textgen_time_to_first_piece_seconds_count`:                      2,
		`caddy_textgen_generation_duration_seconds_count`:                      2,
		`caddy_textgen_backend_errors_total{kind="model_missing"}`:             1,
		`caddy_textgen_rejections_total{reason="rate_limit_key"}`:              1,
		`caddy_textgen_ledger_op_duration_seconds_count{op="reserve"}`:         3,
		`caddy_textgen_ledger_op_duration_seconds_count{op="settle"}`:          2,
		`caddy_textgen_ledger_op_duration_seconds_count{op="void"}`:            1,
		`caddy_textgen_time_to_first_piece_seconds_bucket{le="+Inf"}`:          2,
		`caddy_textgen_generation_duration_seconds_bucket{le="+Inf"}`:          2,
		`caddy_textgen_ledger_op_duration_seconds_bucket{op="void",le="+Inf"}`: 1,
	} {
		got, ok := after[series]
		if !ok {
			t.Errorf("%s: not exported", series)
			continue
		}
		if d := got - before[series]; d != want {
			t.Errorf("%s: +%v, want +%v", series, d, want)
		}
	}
	// The open-holds gauge counts a generation while it streams, and lets go of it after.
	fs.Set(ollamatest.FaultConfig{Pieces: 30, Piece: "slow ", Delay: 10 * time.Millisecond})
	running, err := e.post(context.Background(), key2, genBody("summarizer", "x", "en", ""))
	if err != nil || running.StatusCode != 200 {
		t.Fatalf("slow generation: %v %v", running, err)
	}
	if _, err := io.ReadFull(running.Body, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	if d := scrape(t, e)[`caddy_textgen_holds_open`] - before[`caddy_textgen_holds_open`]; d != 1 {
		t.Errorf("holds_open during a generation: +%v, want +1", d)
	}
	io.Copy(io.Discard, running.Body)
	running.Body.Close()
	if d := scrape(t, e)[`caddy_textgen_holds_open`] - before[`caddy_textgen_holds_open`]; d != 0 {
		t.Errorf("holds_open after the generation: +%v, want +0", d)
	}
	// No label carries a key or an account.
	for series := range after {
		for _, secret := range []string{key, key2, acct.ID, acct2.ID, "acct_", "key_", "tg_live_"} {
			if strings.Contains(series, secret) {
				t.Errorf("series %s names a key or account", series)
			}
		}
	}
}

// TestMetricsUnmatchedPayments checks the gauge an operator alerts on: paid sessions that
// credited nothing and are not resolved yet.
func TestMetricsUnmatchedPayments(t *testing.T) {
	e := newEnv(t, envOptions{ollama: "http://127.0.0.1:1", site: "handle /metrics {\n\t\tmetrics\n\t}"}) // no model call
	const series = `caddy_textgen_unmatched_payments_open`
	before, ok := scrape(t, e)[series]
	if !ok {
		t.Fatalf("%s: not exported", series)
	}
	for _, ref := range []string{"cs_test_metric_1", "cs_test_metric_2"} {
		if _, _, err := e.store.RecordUnmatchedPayment(context.Background(), ledger.UnmatchedPayment{
			Reference: ref, AccountID: "acct_0000000000000000", AmountCents: 200, Currency: "eur", Problem: ledger.ProblemUnknownAccount,
		}); err != nil {
			t.Fatal(err)
		}
	}
	if d := scrape(t, e)[series] - before; d != 2 {
		t.Errorf("%s after two payments: +%v, want +2", series, d)
	}
	if _, _, err := e.store.ResolveUnmatchedPayment(context.Background(), "cs_test_metric_1", "refunded"); err != nil {
		t.Fatal(err)
	}
	if d := scrape(t, e)[series] - before; d != 1 {
		t.Errorf("%s after resolving one: +%v, want +1", series, d)
	}
}

// TestMetricsMailOutbox checks the gauges of stuck e-mail: how many messages wait, and how old
// the oldest is, back to where they were once the message is gone.
func TestMetricsMailOutbox(t *testing.T) {
	e := newEnv(t, envOptions{ollama: "http://127.0.0.1:1", site: "handle /metrics {\n\t\tmetrics\n\t}"}) // no model call
	const queued, oldest = `caddy_textgen_mail_queued`, `caddy_textgen_mail_oldest_seconds`
	before := scrape(t, e)
	if _, ok := before[queued]; !ok {
		t.Fatalf("%s: not exported", queued)
	}
	if before[queued] != 0 || before[oldest] != 0 {
		t.Fatalf("a new ledger's outbox: %s %v, %s %v; want 0 and 0", queued, before[queued], oldest, before[oldest])
	}
	id, err := e.store.EnqueueMail(context.Background(), ledger.MailMessage{Kind: "verify", Sealed: []byte("sealed by the caller")})
	if err != nil {
		t.Fatal(err)
	}
	firstQueued := time.Now() // the first message was queued before this
	time.Sleep(100 * time.Millisecond)
	id2, err := e.store.EnqueueMail(context.Background(), ledger.MailMessage{Kind: "reset", Sealed: []byte("sealed too")})
	if err != nil {
		t.Fatal(err)
	}
	scraped := time.Now()
	after := scrape(t, e)
	if after[queued] != 2 {
		t.Errorf("%s with two messages: %v, want 2", queued, after[queued])
	}
	// The age is the first message's: at least the time from its queueing to the scrape (the
	// second message, queued 100 ms later, is younger than that).
	if age, least := after[oldest], scraped.Sub(firstQueued).Seconds(); age < least {
		t.Errorf("%s: %v, want the first message's age, at least %v", oldest, age, least)
	}
	if err := e.store.DropMail(context.Background(), id2); err != nil {
		t.Fatal(err)
	}
	if err := e.store.DropMail(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if gone := scrape(t, e); gone[queued] != 0 || gone[oldest] != 0 {
		t.Errorf("after the message was dropped: %s %v, %s %v; want 0 and 0", queued, gone[queued], oldest, gone[oldest])
	}
}

// TestMetricsReversals checks the refunds counter and the open disputes gauge: read from the
// ledger, so a refund delivered twice counts once and a dispute leaves the gauge when it closes.
func TestMetricsReversals(t *testing.T) {
	e := newEnv(t, envOptions{ollama: "http://127.0.0.1:1", site: "handle /metrics {\n\t\tmetrics\n\t}"}) // no model call
	const refunds, disputes = `caddy_textgen_refunds_total`, `caddy_textgen_disputes_open`
	ctx := context.Background()
	before := scrape(t, e)
	if _, ok := before[refunds]; !ok {
		t.Fatalf("%s: not exported", refunds)
	}
	acct, _ := e.account(0)
	for _, pi := range []string{"pi_metric_1", "pi_metric_2"} {
		if _, _, err := e.store.RecordPayment(ctx, ledger.Payment{ID: pi, Reference: "cs_" + pi, AccountID: acct.ID,
			AmountCents: 200, Currency: "eur", Status: ledger.PaymentPaid}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // Stripe delivers at least once
		for _, req := range []ledger.ReversalRequest{
			{ID: "re_metric", Kind: ledger.ReversalRefund, Payment: "pi_metric_1", AmountCents: 100, Status: ledger.RefundApplied},
			{ID: "du_metric", Kind: ledger.ReversalDispute, Payment: "pi_metric_2", AmountCents: 200, Status: ledger.DisputeOpen},
		} {
			if _, err := e.store.Reverse(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
	}
	after := scrape(t, e)
	if after[refunds]-before[refunds] != 1 || after[disputes]-before[disputes] != 1 {
		t.Errorf("after one refund and one dispute: %s +%v, %s +%v; want +1, +1", refunds, after[refunds]-before[refunds],
			disputes, after[disputes]-before[disputes])
	}
	if _, err := e.store.Reverse(ctx, ledger.ReversalRequest{ID: "du_metric", Kind: ledger.ReversalDispute, Payment: "pi_metric_2",
		AmountCents: 200, Status: ledger.DisputeWon}); err != nil {
		t.Fatal(err)
	}
	if d := scrape(t, e)[disputes] - before[disputes]; d != 0 {
		t.Errorf("%s after the dispute was won: +%v, want +0", disputes, d)
	}
}

// parseMetrics reads the caddy_textgen_ series of a metrics answer.
var parseMetrics = apitest.ParseMetrics
