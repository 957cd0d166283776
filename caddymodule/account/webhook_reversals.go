package account

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/stripe/stripe-go/v82"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// Money that flows back: refunds and disputes (chargebacks) of a purchase reach the ledger
// through the webhook, whoever made them (Stripe's dashboard, its API, `caddy textgen payments
// refund`), once per refund or dispute id, which the ledger keeps (ledger.Reversals).
//
//   - refund.created, refund.updated, refund.failed (and the older charge.refund.updated) carry
//     the Refund: pending or succeeded takes the refunded share of the purchase's credits off,
//     failed or canceled gives them back. charge.refunded, the event Stripe's guide names, carries
//     the Charge: every refund it lists is applied the same way (the list is in the event for
//     API versions before 2022-11-15; for later ones the refunds are read from Stripe's API).
//   - charge.dispute.created freezes the disputed purchase's credits (takes them off);
//     charge.dispute.closed gives them back when won (or an inquiry closed), makes it final when
//     lost. Other dispute events change nothing.
//   - They name the PaymentIntent, which the ledger knows from the purchase's
//     checkout.session.completed (webhook.go records it). An event whose payment is not known
//     is looked up at Stripe (webhook_link.go: a purchase credited before payments were
//     recorded is linked then); one whose purchase is not there yet (Stripe does not promise
//     order: a refund may arrive before the session's completion) is answered 500, so Stripe
//     delivers it again later, when the purchase is there; the same for a ledger that cannot
//     take it. Nothing is lost and nothing is applied twice.

// reversal is one refund or dispute event as the ledger takes it, and what the webhook reports.
type reversal struct {
	req ledger.ReversalRequest
	// what names it in logs and replies: "refund", "dispute".
	what string
}

// webhookReversal handles a refund or dispute event; ok is false for another event type.
func (a *app) webhookReversal(w http.ResponseWriter, r *http.Request, log *zap.Logger, ev stripe.Event) bool {
	var rs []reversal
	var err error
	switch ev.Type {
	case "refund.created", "refund.updated", "refund.failed", "charge.refund.updated":
		var re stripe.Refund
		if err = json.Unmarshal(ev.Data.Raw, &re); err == nil {
			rs = append(rs, refundReversal(&re, ""))
		}
	case "charge.refunded":
		var ch stripe.Charge
		if err = json.Unmarshal(ev.Data.Raw, &ch); err == nil {
			rs, err = a.chargeRefunds(r.Context(), &ch)
		}
	case "charge.dispute.created", "charge.dispute.closed":
		var d stripe.Dispute
		if err = json.Unmarshal(ev.Data.Raw, &d); err == nil {
			rev, known := disputeReversal(&d, ev.Type == "charge.dispute.created")
			if !known {
				log.Info("a dispute closed in a state that changes nothing", zap.String("dispute", d.ID), zap.String("status", string(d.Status)))
				webhookReply(w, http.StatusOK, "ignored: dispute status "+string(d.Status))
				return true
			}
			rs = append(rs, rev)
		}
	default:
		return false
	}
	if err != nil {
		log.Error("a refund or dispute event that could not be read; answering 500 so that Stripe retries", zap.Error(err))
		webhookReply(w, http.StatusInternalServerError, "unreadable event")
		return true
	}
	var replies []string
	for _, rev := range rs {
		rev.req.Event = ev.ID
		status, reply, _ := a.applyReversal(r.Context(), log, rev)
		if status != http.StatusOK {
			webhookReply(w, status, reply)
			return true
		}
		replies = append(replies, reply)
	}
	if len(replies) == 0 {
		replies = append(replies, "ignored: no refund")
	}
	webhookReply(w, http.StatusOK, strings.Join(replies, "; "))
	return true
}

// applyReversal applies one refund or dispute to the ledger and says what to answer Stripe.
// It is the one path of every refund and dispute: the operator's refund command takes it too,
// with the Refund that Stripe's API answered.
func (a *app) applyReversal(ctx context.Context, log *zap.Logger, rev reversal) (int, string, ledger.ReversalResult) {
	req := rev.req
	log = log.With(zap.String(rev.what, req.ID), zap.String("payment_intent", req.Payment), zap.String("status", req.Status))
	if req.Payment == "" {
		// A charge made outside Checkout (no PaymentIntent): not a purchase of this service.
		log.Info("a " + rev.what + " of a charge without a payment intent; not a purchase, nothing taken")
		return http.StatusOK, "ignored: " + rev.what + " of no purchase", ledger.ReversalResult{}
	}
	res, err := a.store.Reverse(ctx, req)
	if errors.Is(err, ledger.ErrNotFound) {
		// A purchase from before payments were recorded, or one whose completion has not
		// arrived: Stripe's API says which session it paid (webhook_link.go).
		switch a.linkPayment(ctx, log, req.Payment) {
		case linkLinked:
			res, err = a.store.Reverse(ctx, req)
		case linkNotOurs:
			return http.StatusOK, "ignored: " + rev.what + " of no purchase", res
		}
	}
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		log.Warn("a " + rev.what + " of a payment the ledger does not know (yet); answering 500 so that Stripe retries once its purchase is recorded")
		return http.StatusInternalServerError, "unknown payment: retry later", res
	case errors.Is(err, ledger.ErrInvalidArgument):
		log.Error("a "+rev.what+" event the ledger refuses; nothing taken", zap.Error(err))
		return http.StatusOK, "ignored: " + err.Error(), res
	case err != nil:
		log.Error("applying a "+rev.what+" failed; answering 500 so that Stripe retries", zap.Error(err))
		return http.StatusInternalServerError, "ledger error", res
	case res.Repeated:
		log.Info("the " + rev.what + " was applied before; nothing changed")
		return http.StatusOK, "duplicate: " + rev.what + " applied before", res
	}
	log.Info(rev.what+" applied", zap.String("account", res.Reversal.AccountID), zap.String("checkout_session", res.Reversal.Reference),
		zap.Int64("amount_cents", req.AmountCents), zap.Int64("credits", res.Entry.Amount), zap.Int64("balance", res.Balance.Balance))
	a.reversalApplied(ctx, log, res)
	return http.StatusOK, rev.what + " " + res.Reversal.Status, res
}

// refundReversal is the ledger's request for Stripe's Refund re (of payment pi when the refund
// does not name it).
func refundReversal(re *stripe.Refund, pi string) reversal {
	if re.PaymentIntent != nil && re.PaymentIntent.ID != "" {
		pi = re.PaymentIntent.ID
	}
	status := ledger.RefundApplied
	switch re.Status {
	case stripe.RefundStatusFailed, stripe.RefundStatusCanceled:
		status = ledger.RefundFailed
	}
	return reversal{what: "refund", req: ledger.ReversalRequest{ID: re.ID, Kind: ledger.ReversalRefund, Payment: pi,
		AmountCents: re.Amount, Currency: string(re.Currency), Status: status, Reason: string(re.Reason)}}
}

// chargeRefunds are the refunds of a charge.refunded event: those the Charge lists, else (API
// versions since 2022-11-15 leave the list out) those Stripe's API lists for the charge.
func (a *app) chargeRefunds(ctx context.Context, ch *stripe.Charge) ([]reversal, error) {
	pi := ""
	if ch.PaymentIntent != nil {
		pi = ch.PaymentIntent.ID
	}
	var out []reversal
	if ch.Refunds != nil && !ch.Refunds.HasMore {
		for _, re := range ch.Refunds.Data {
			out = append(out, refundReversal(re, pi))
		}
		return out, nil
	}
	if pi == "" {
		return []reversal{{what: "refund"}}, nil // not a purchase: answered as such
	}
	for re, err := range a.stripe.V1Refunds.List(ctx, &stripe.RefundListParams{Charge: stripe.String(ch.ID)}) {
		if err != nil {
			return nil, err
		}
		out = append(out, refundReversal(re, pi))
	}
	return out, nil
}

// disputeReversal is the ledger's request for Stripe's Dispute d: open when created, won or
// lost when closed (known false for a close that is neither).
func disputeReversal(d *stripe.Dispute, created bool) (reversal, bool) {
	pi := ""
	if d.PaymentIntent != nil {
		pi = d.PaymentIntent.ID
	}
	status := ledger.DisputeOpen
	if !created {
		switch d.Status {
		case stripe.DisputeStatusWon, stripe.DisputeStatusWarningClosed:
			status = ledger.DisputeWon
		case stripe.DisputeStatusLost:
			status = ledger.DisputeLost
		default:
			return reversal{}, false
		}
	}
	return reversal{what: "dispute", req: ledger.ReversalRequest{ID: d.ID, Kind: ledger.ReversalDispute, Payment: pi,
		AmountCents: d.Amount, Currency: string(d.Currency), Status: status, Reason: string(d.Reason)}}, true
}

// reversalApplied is what follows a refund or dispute the ledger applied now (not a repeat):
// the e-mails (the customer's of a refund, the operator's of a new dispute). Only the instance
// whose Reverse changed the ledger gets here, so each is queued once however often and to
// however many instances Stripe delivers the event. The reversal is durable before the e-mail
// is queued: a ledger that fails in between loses the e-mail (logged), never money.
func (a *app) reversalApplied(ctx context.Context, log *zap.Logger, res ledger.ReversalResult) {
	rv, p := res.Reversal, res.Payment
	a.reversalAlert(ctx, rv)
	d := mailData{ID: rv.ID, Amount: money(rv.AmountCents, rv.Currency), Total: money(p.AmountCents, p.Currency),
		Reference: rv.Reference, Payment: rv.Payment, AccountID: rv.AccountID, Credits: rv.Credits,
		Reason: cmp.Or(rv.Reason, "none given"), Status: rv.Status, Date: rv.Created.UTC().Format("2006-01-02 15:04")}
	switch {
	case rv.Kind == ledger.ReversalRefund && rv.Status == ledger.RefundApplied:
		if a.mail == nil || rv.AccountID == "" {
			return
		}
		acct, err := a.store.GetAccount(ctx, rv.AccountID)
		if err != nil {
			log.Error("the refund is applied, but its e-mail to the customer is not sent: reading the account", zap.Error(err))
			return
		}
		d.Refund = "partial"
		if p.RefundedCents >= p.AmountCents {
			d.Refund = "full"
		}
		d.Link = a.publicURL + a.prefix + "/receipts/" + url.PathEscape(rv.Reference)
		if err := a.queueMail(ctx, acct, "refund", d); err != nil {
			log.Error("the refund is applied, but its e-mail to the customer is not sent", zap.Error(err))
		}
	case rv.Kind == ledger.ReversalDispute && rv.Created.Equal(rv.Updated) && rv.Status != ledger.DisputeWon:
		// New: open, or lost before its creation arrived. The operator has days to answer it.
		log.Warn("a new dispute: answer it in the Stripe Dashboard", zap.String("account", rv.AccountID),
			zap.String("reason", rv.Reason), zap.Int64("amount_cents", rv.AmountCents))
		if a.mail == nil || a.operatorEmail == "" {
			return
		}
		if rv.AccountID != "" {
			if acct, err := a.store.GetAccount(ctx, rv.AccountID); err == nil {
				d.Email = acct.Email
			}
		}
		d.Email = cmp.Or(d.Email, "no account")
		if err := a.queueMailTo(ctx, rv.AccountID, a.operatorEmail, "dispute", d); err != nil {
			log.Error("the dispute is applied, but its e-mail to the operator is not sent", zap.Error(err))
		}
	}
}

// reversalAlert raises the account's alert of a refund applied, a new dispute or a dispute
// decided. The event's id is the reversal's and its status: one per change.
func (a *app) reversalAlert(ctx context.Context, rv ledger.Reversal) {
	if rv.AccountID == "" {
		return
	}
	var kind string
	switch {
	case rv.Kind == ledger.ReversalRefund && rv.Status == ledger.RefundApplied:
		kind = ledger.AlertRefundCreated
	case rv.Kind == ledger.ReversalDispute && rv.Created.Equal(rv.Updated):
		kind = ledger.AlertDisputeCreated
	case rv.Kind == ledger.ReversalDispute && rv.Status != ledger.DisputeOpen:
		kind = ledger.AlertDisputeClosed
	default:
		return
	}
	_ = a.raiseAlert(ctx, rv.AccountID, kind, rv.ID+"\x00"+rv.Status, map[string]any{
		"id": rv.ID, "reference": rv.Reference, "amount_cents": rv.AmountCents, "currency": strings.ToUpper(rv.Currency),
		"credits": rv.Credits, "status": rv.Status, "reason": rv.Reason})
}

// money writes cents of currency: euros as the pages do (€2.00), others as 2.00 USD.
func money(cents int64, currency string) string {
	if strings.EqualFold(currency, "eur") || currency == "" {
		return formatEuro(cents)
	}
	return fmt.Sprintf("%d.%02d %s", cents/100, cents%100, strings.ToUpper(currency))
}
