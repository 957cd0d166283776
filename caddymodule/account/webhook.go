package account

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/stripe/stripe-go/v82/webhook"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/clientip"
	"github.com/caddy-textgen/textgen/ledger"
)

// The Stripe webhook credits paid Checkout Sessions.
//
//   - The signature (Stripe-Signature, HMAC-SHA256 with the endpoint's secret) and its
//     timestamp (at most WebhookTolerance old) are checked first; a failure is 400.
//   - checkout.session.completed and checkout.session.async_payment_succeeded credit the
//     session's package when payment_status is "paid", and record its payment intent, which
//     refunds and disputes name (webhook_reversals.go). An unpaid session (a delayed payment
//     method: its async_payment_succeeded or _failed event comes later) is recorded as a pending
//     payment, which My Account shows; checkout.session.async_payment_failed records it failed
//     and credits nothing. Other events are acknowledged with 200 and logged, because retrying
//     cannot change them.
//   - A session is credited only when it paid the price of its package in EUR (the package as
//     the session was created for it: its metadata). A paid session that cannot be credited
//     (another amount or currency, an unknown package, an unknown account) is kept in the
//     ledger's unmatched payments, once per session, and logged as an error: the operator's
//     to-do list (caddy textgen payments list), where they resolve it after crediting it by hand
//     or refunding it. Only then is it acknowledged with 200; if the ledger cannot keep it, 500.
//   - The purchase is a ledger grant whose reference is the Checkout Session id: a replayed or
//     retried event (Stripe delivers at least once) credits nothing the second time.
//   - 2xx is sent only after the grant is durable (synced to disk). If the ledger fails, the
//     answer is 500 and Stripe retries for up to three days, so a paid session is never lost.
//
// The event's API version is not checked (IgnoreAPIVersionMismatch): only fields that every
// version has are read (id, client_reference_id, payment_status, amount_total, currency,
// metadata), so the endpoint may be registered with any API version.

// checkoutSession is the part of a Checkout Session object the webhook reads.
type checkoutSession struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	ClientReferenceID string            `json:"client_reference_id"`
	PaymentStatus     string            `json:"payment_status"`
	AmountTotal       int64             `json:"amount_total"`
	Currency          string            `json:"currency"`
	Mode              string            `json:"mode"`
	Metadata          map[string]string `json:"metadata"`
	// PaymentIntent is what refunds and disputes of the session name (an id: the webhook's
	// payloads do not expand it).
	PaymentIntent string `json:"payment_intent"`
}

func (a *app) webhook(w http.ResponseWriter, r *http.Request) {
	if a.stripe == nil {
		http.Error(w, "buying credits is not configured", http.StatusNotFound)
		return
	}
	payload, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBody))
	if err != nil {
		webhookReply(w, http.StatusRequestEntityTooLarge, "body too large or unreadable")
		return
	}
	ev, err := webhook.ConstructEventWithOptions(payload, r.Header.Get("Stripe-Signature"), a.webhookSecret,
		webhook.ConstructEventOptions{Tolerance: a.webhookTolerance, IgnoreAPIVersionMismatch: true})
	if err != nil {
		a.logger.Warn("refused a Stripe webhook", zap.Error(err), zap.String("client", clientip.Key(r)))
		msg := "invalid signature"
		if errors.Is(err, webhook.ErrTooOld) {
			msg = "timestamp outside the tolerance"
		}
		webhookReply(w, http.StatusBadRequest, msg)
		return
	}
	log := a.logger.With(zap.String("event", ev.ID), zap.String("type", string(ev.Type)))
	if ev.Data != nil && a.webhookReversal(w, r, log, ev) {
		return
	}
	if ev.Data != nil && a.webhookTopUp(w, r, log, ev) { // webhook_topup.go
		return
	}
	switch ev.Type {
	case "checkout.session.completed", "checkout.session.async_payment_succeeded", "checkout.session.async_payment_failed":
	default:
		log.Debug("ignored a Stripe event of another type")
		webhookReply(w, http.StatusOK, "ignored: event type")
		return
	}
	var cs checkoutSession
	if ev.Data == nil || json.Unmarshal(ev.Data.Raw, &cs) != nil || cs.ID == "" {
		log.Error("a checkout event without a readable Checkout Session; not credited")
		webhookReply(w, http.StatusOK, "ignored: no checkout session")
		return
	}
	log = log.With(zap.String("checkout_session", cs.ID), zap.String("account", cs.ClientReferenceID))
	if ev.Type == "checkout.session.async_payment_failed" || cs.PaymentStatus != "paid" {
		a.delayedPayment(w, r, log, cs, ev.Type == "checkout.session.async_payment_failed")
		return
	}
	res, pkg, ok := a.creditPaid(w, r, log, paidPackage{event: ev.ID, account: cs.ClientReferenceID, reference: cs.ID,
		intent: cs.PaymentIntent, reason: checkoutReason, cents: cs.AmountTotal, currency: cs.Currency, metadata: cs.Metadata})
	if !ok {
		return
	}
	// Raised on a repeat too (the first delivery may have failed before it got here): the
	// event's id is the session's, so an endpoint gets it once.
	_ = a.raiseAlert(r.Context(), cs.ClientReferenceID, ledger.AlertPurchaseCompleted, cs.ID, map[string]any{
		"reference": cs.ID, "package": pkg.ID, "credits": pkg.Credits, "amount_cents": cs.AmountTotal,
		"currency": strings.ToUpper(cs.Currency)})
	if res.Repeated {
		log.Info("checkout session was credited before; nothing credited again")
		webhookReply(w, http.StatusOK, "duplicate: credited before")
		return
	}
	log.Info("purchase credited", zap.String("package", pkg.ID), zap.Int64("credits", pkg.Credits),
		zap.Int64("amount_cents", cs.AmountTotal), zap.Int64("available", res.Balance.Available))
	webhookReply(w, http.StatusOK, "credited")
}

// paidPackage is a payment for a package: a Checkout Session's, or an automatic top-up's
// PaymentIntent (webhook_topup.go).
type paidPackage struct {
	event, account string
	// reference is the purchase's grant reference (the session's or the PaymentIntent's id):
	// a repeated event credits nothing the second time.
	reference string
	// intent is the PaymentIntent that refunds and disputes name ("" for a session without one).
	intent   string
	reason   string // the purchase entry's reason, before the package id
	cents    int64
	currency string
	metadata map[string]string // the package as the payment was created for it
}

// creditPaid credits p's package once and records the payment that refunds and disputes name.
// A payment that cannot be credited (an unknown package or account, another amount or
// currency) is kept in the ledger's unmatched payments. Where it ends the webhook's answer
// (unmatched, the ledger failed) it writes it and returns ok false.
func (a *app) creditPaid(w http.ResponseWriter, r *http.Request, log *zap.Logger, p paidPackage) (res ledger.GrantResult, pkg Package, ok bool) {
	payment := ledger.Payment{ID: p.intent, Reference: p.reference, AccountID: p.account, Package: p.metadata["package"],
		AmountCents: p.cents, Currency: p.currency, Status: ledger.PaymentPaid}
	unmatched := ledger.UnmatchedPayment{Reference: p.reference, Event: p.event, AccountID: p.account,
		Package: p.metadata["package"], AmountCents: p.cents, Currency: p.currency}
	pkg, ok = a.packageOf(p.metadata)
	if !ok {
		unmatched.Problem, unmatched.Detail = ledger.ProblemUnknownPackage, "no package of this id is configured"
		a.keepUnmatched(w, r, log, unmatched, payment, "ignored: unknown package")
		return res, pkg, false
	}
	unmatched.Credits = pkg.Credits
	if !strings.EqualFold(p.currency, "eur") || p.cents != pkg.PriceCents {
		// A price changed by hand in Stripe, a coupon, a tampered session: the customer paid
		// something else than the package costs. Crediting it anyway would sell credits below
		// their price; the operator decides (credit by hand, or refund).
		unmatched.Problem = ledger.ProblemAmountMismatch
		unmatched.Detail = fmt.Sprintf("paid %d %s cents; package %s costs %d EUR cents for %d credits",
			p.cents, strings.ToUpper(p.currency), pkg.ID, pkg.PriceCents, pkg.Credits)
		a.keepUnmatched(w, r, log, unmatched, payment, "ignored: amount differs from the package price")
		return res, pkg, false
	}
	res, err := a.store.Grant(r.Context(), ledger.GrantRequest{
		AccountID:   p.account,
		Mode:        ledger.Live,
		Kind:        ledger.KindPurchase,
		Credits:     pkg.Credits,
		Reference:   p.reference,
		Reason:      p.reason + pkg.ID,
		AmountCents: p.cents,
		Currency:    strings.ToUpper(p.currency),
		Expires:     pkg.expiresFrom(now()),
	})
	if errors.Is(err, ledger.ErrNotFound) {
		unmatched.Problem, unmatched.Detail = ledger.ProblemUnknownAccount, "no account has this id"
		a.keepUnmatched(w, r, log, unmatched, payment, "ignored: unknown account")
		return res, pkg, false
	}
	if err != nil {
		log.Error("crediting a paid package failed; answering 500 so that Stripe retries", zap.Error(err))
		webhookReply(w, http.StatusInternalServerError, "ledger error")
		return res, pkg, false
	}
	// The payment that refunds and disputes will name, recorded after the purchase (also when
	// the purchase is a repeat: a delivery that failed between the two records it now).
	payment.Credits = pkg.Credits
	if !a.recordPayment(w, r, log, payment) {
		return res, pkg, false
	}
	return res, pkg, true
}

// keepUnmatched keeps a paid session that credits nothing in the ledger's unmatched payments
// and acknowledges it with reply. The event is acknowledged only once the record is durable: if
// the ledger fails, 500, and Stripe delivers it again.
func (a *app) keepUnmatched(w http.ResponseWriter, r *http.Request, log *zap.Logger, p ledger.UnmatchedPayment, payment ledger.Payment, reply string) {
	fields := []zap.Field{zap.String("problem", p.Problem), zap.String("detail", p.Detail),
		zap.String("package", p.Package), zap.Int64("amount_cents", p.AmountCents), zap.String("currency", p.Currency)}
	_, repeated, err := a.store.RecordUnmatchedPayment(r.Context(), p)
	switch {
	case err != nil:
		log.Error("a PAID checkout session that credits nothing could not be kept in the ledger; answering 500 so that Stripe retries",
			append(fields, zap.Error(err))...)
		webhookReply(w, http.StatusInternalServerError, "ledger error")
		return
	case !a.recordPayment(w, r, log, payment): // its refund (the operator's remedy) must be found
		return
	case repeated:
		log.Info("a PAID checkout session that credits nothing was kept before", fields...)
	default:
		log.Error("a PAID checkout session was NOT credited: see `"+listUnmatched+"`, credit it by hand ("+grantByHand+") or refund it, then resolve it ("+resolveUnmatched+")",
			fields...)
	}
	webhookReply(w, http.StatusOK, reply)
}

// recordPayment records the payment of a Checkout Session, which refunds and disputes name, and
// answers 500 when the ledger cannot (Stripe delivers the event again). A session without a
// payment intent (an API version or mode without one) has nothing to record.
func (a *app) recordPayment(w http.ResponseWriter, r *http.Request, log *zap.Logger, p ledger.Payment) bool {
	if p.ID == "" {
		log.Warn("a checkout session without a payment intent: its refunds and disputes cannot be traced to it")
		return true
	}
	if p.Currency == "" {
		p.Currency = "eur"
	}
	if _, _, err := a.store.RecordPayment(r.Context(), p); err != nil {
		log.Error("recording the payment of a checkout session failed; answering 500 so that Stripe retries",
			zap.String("payment_intent", p.ID), zap.Error(err))
		webhookReply(w, http.StatusInternalServerError, "ledger error")
		return false
	}
	return true
}

// delayedPayment handles a Checkout Session whose payment settles later (SEPA Direct Debit and
// other delayed methods): completed but not paid yet, it is recorded as pending, which My
// Account shows; its async_payment_failed event records it failed and credits nothing (its
// async_payment_succeeded event credits it, as a paid completion does).
func (a *app) delayedPayment(w http.ResponseWriter, r *http.Request, log *zap.Logger, cs checkoutSession, failed bool) {
	status, reply := ledger.PaymentPending, "ignored: not paid (payment pending)"
	if failed {
		status, reply = ledger.PaymentFailed, "ignored: payment failed"
	}
	log.Info("checkout session not paid; not credited", zap.String("payment_status", cs.PaymentStatus), zap.String("recorded", string(status)))
	known, err := a.accountKnown(r, cs.ClientReferenceID)
	if err != nil {
		log.Error("reading the account of a delayed payment failed; answering 500 so that Stripe retries", zap.Error(err))
		webhookReply(w, http.StatusInternalServerError, "ledger error")
		return
	}
	if cs.PaymentIntent != "" && known {
		p := ledger.Payment{ID: cs.PaymentIntent, Reference: cs.ID, AccountID: cs.ClientReferenceID, Package: cs.Metadata["package"],
			AmountCents: cs.AmountTotal, Currency: cs.Currency, Status: status}
		if !a.recordPayment(w, r, log, p) {
			return
		}
	}
	webhookReply(w, http.StatusOK, reply)
}

// accountKnown reports whether an account has id (a session for no account records nothing
// pending).
func (a *app) accountKnown(r *http.Request, id string) (bool, error) {
	if id == "" {
		return false, nil
	}
	_, err := a.store.GetAccount(r.Context(), id)
	if errors.Is(err, ledger.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// What an operator runs for a paid session the webhook could not credit.
const (
	listUnmatched    = "caddy textgen payments list"
	grantByHand      = "caddy textgen credits grant --account <account id> --credits <n> --reference <checkout session id>"
	resolveUnmatched = "caddy textgen payments resolve --reference <checkout session id> --note <what you did>"
)

// packageOf is the package a payment was created for: its credits and price as buy (or a
// top-up) wrote them into the payment's metadata (a later change of the configured package does
// not change what this customer was offered), else the configured package of that id.
func (a *app) packageOf(md map[string]string) (Package, bool) {
	pkg, ok := a.packageBy[md["package"]]
	credits, cerr := strconv.ParseInt(md["credits"], 10, 64)
	price, perr := strconv.ParseInt(md["price_cents"], 10, 64)
	if cerr == nil && perr == nil && credits > 0 && price > 0 && md["package"] != "" {
		p := Package{ID: md["package"], Credits: credits, PriceCents: price}
		if secs, err := strconv.ParseInt(md["expires_seconds"], 10, 64); err == nil && secs > 0 {
			p.Expires = caddy.Duration(time.Duration(secs) * time.Second)
		}
		return p, true
	}
	return pkg, ok
}

func webhookReply(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"status": msg})
}

// expiresFrom is when the credits of the package bought at t expire; zero: never.
func (p Package) expiresFrom(t time.Time) time.Time {
	if p.Expires <= 0 {
		return time.Time{}
	}
	return t.Add(time.Duration(p.Expires)).UTC()
}
