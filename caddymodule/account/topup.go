package account

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v82"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// Automatic top-up: an account's owner saves a card (a Stripe Checkout Session in setup mode,
// topup_page.go) and a rule, "when fewer than N credits are available, buy package P, at most
// K times a month". When a live hold leaves the balance under N (the textgen handler tells
// Held, textgenapp.HeldLive) or the periodic sweep finds it under N, the ledger's BeginTopUp
// makes one pending top-up (one across instances), and one off-session PaymentIntent is made
// with the top-up's id as Stripe's idempotency key. Credits come only through the webhook's
// payment_intent.succeeded (webhook_topup.go), as a purchase's do. A decline, or a bank that
// asks the customer to confirm (SCA), pauses the rule and e-mails the account.

const (
	// topUpEvery is how often the sweep looks for accounts under their threshold (holds on
	// other instances, top-ups whose charge could not be sent) and refreshes the rules.
	topUpEvery = time.Minute
	// topUpRetryAfter is how long a pending top-up without a payment waits before the sweep
	// sends its charge again (same idempotency key: Stripe makes it once).
	topUpRetryAfter = time.Minute
	// topUpCooldown is how long after a try a hold does not try the account again; the sweep
	// does.
	topUpCooldown = 30 * time.Second
	// topUpSlots bounds the top-ups this instance sends at once.
	topUpSlots = 8
)

// topUpState is what the app keeps in memory to decide after a hold, without a ledger read,
// whether a top-up is due.
type topUpState struct {
	mu        sync.RWMutex
	threshold map[string]int64     // accounts with an active rule -> N
	tried     map[string]time.Time // account -> last try started by a hold
	slots     chan struct{}
	stop      chan struct{}
	done      chan struct{}
}

// startTopUps starts the sweep (the app has Stripe and top_up on).
func (a *app) startTopUps() {
	a.topUps = &topUpState{threshold: map[string]int64{}, tried: map[string]time.Time{},
		slots: make(chan struct{}, topUpSlots), stop: make(chan struct{}), done: make(chan struct{})}
	go a.runTopUps()
}

// stopTopUps stops the top-up loop and waits for it; it is safe to call more than once.
func (a *app) stopTopUps() {
	if a.topUps == nil {
		return
	}
	select {
	case <-a.topUps.stop:
	default:
		close(a.topUps.stop)
	}
	<-a.topUps.done
}

func (a *app) runTopUps() {
	defer close(a.topUps.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-a.topUps.stop
		cancel()
	}()
	t := time.NewTicker(topUpEvery)
	defer t.Stop()
	for {
		a.sweepTopUps(ctx)
		select {
		case <-t.C:
		case <-a.topUps.stop:
			a.background.Wait()
			return
		}
	}
}

// Held is the textgen handler's word after a live hold (textgenapp.TopUpWatcher): a map lookup,
// and a top-up in the background when the account is under its threshold.
func (a *app) Held(account string, available int64) {
	s := a.topUps
	s.mu.RLock()
	n, ok := s.threshold[account]
	last := s.tried[account]
	s.mu.RUnlock()
	if !ok || available >= n || time.Since(last) < topUpCooldown {
		return
	}
	s.mu.Lock()
	if time.Since(s.tried[account]) < topUpCooldown {
		s.mu.Unlock()
		return
	}
	s.tried[account] = time.Now()
	s.mu.Unlock()
	select {
	case s.slots <- struct{}{}:
	default:
		return // busy: the sweep tries it
	}
	a.background.Go(func() {
		defer func() { <-s.slots }()
		a.topUp(context.Background(), account)
	})
}

// refreshRules reloads the in-memory thresholds from the ledger's active rules.
func (a *app) refreshRules(ctx context.Context) ([]ledger.TopUpRule, error) {
	rules, err := a.store.ActiveTopUpRules(ctx)
	if err != nil {
		return nil, err
	}
	m := make(map[string]int64, len(rules))
	for _, r := range rules {
		m[r.AccountID] = r.Threshold
	}
	a.topUps.mu.Lock()
	a.topUps.threshold = m
	for acct, at := range a.topUps.tried {
		if time.Since(at) > topUpCooldown {
			delete(a.topUps.tried, acct)
		}
	}
	a.topUps.mu.Unlock()
	return rules, nil
}

// ruleChanged updates the in-memory threshold of one account after its rule changed here.
func (a *app) ruleChanged(r ledger.TopUpRule) {
	if a.topUps == nil {
		return
	}
	a.topUps.mu.Lock()
	defer a.topUps.mu.Unlock()
	if r.Active() {
		a.topUps.threshold[r.AccountID] = r.Threshold
	} else {
		delete(a.topUps.threshold, r.AccountID)
	}
}

// sweepTopUps tops up every account with an active rule that is under its threshold, and sends
// again the charge of a pending top-up that has no payment yet (a crash or Stripe down).
func (a *app) sweepTopUps(ctx context.Context) {
	rules, err := a.refreshRules(ctx)
	if err != nil {
		if ctx.Err() == nil {
			a.logger.Warn("top-up sweep: listing the rules", zap.Error(err))
		}
		return
	}
	for _, r := range rules {
		if ctx.Err() != nil {
			return
		}
		a.topUp(ctx, r.AccountID)
	}
}

// topUp tops the account up if its rule is active and its balance is under the threshold.
func (a *app) topUp(ctx context.Context, acct string) {
	log := a.logger.With(zap.String("account", acct))
	r, err := a.store.TopUpRule(ctx, acct)
	if err != nil {
		if !errors.Is(err, ledger.ErrNotFound) {
			log.Warn("top-up: reading the rule", zap.Error(err))
		}
		return
	}
	if !r.Active() {
		return
	}
	if a.resendPending(ctx, log, r) {
		return
	}
	b, err := a.store.Balance(ctx, acct)
	if err != nil {
		log.Warn("top-up: reading the balance", zap.Error(err))
		return
	}
	if b.Available >= r.Threshold {
		return
	}
	pkg, ok := a.packageBy[r.Package]
	if !ok {
		why := "The package chosen for automatic top-up is no longer offered. Choose another package on the top-up page."
		if _, err := a.store.PauseTopUp(ctx, acct, why); err != nil {
			log.Warn("top-up: pausing a rule of a package no longer offered", zap.Error(err))
			return
		}
		a.ruleChanged(ledger.TopUpRule{AccountID: acct})
		a.mailTopUpFailed(ctx, log, acct, why)
		return
	}
	t, err := a.store.BeginTopUp(ctx, acct)
	if err != nil {
		if !errors.Is(err, ledger.ErrTopUpRefused) {
			log.Warn("top-up: beginning it", zap.Error(err))
		}
		return
	}
	log.Info("top-up begun", zap.String("topup", t.ID), zap.String("package", pkg.ID),
		zap.Int64("available", b.Available), zap.Int64("threshold", r.Threshold))
	a.chargeTopUp(ctx, log, r, t, pkg)
}

// resendPending sends again the charge of the account's pending top-up that has no payment after
// topUpRetryAfter; it reports whether one is pending (then no other is begun).
func (a *app) resendPending(ctx context.Context, log *zap.Logger, r ledger.TopUpRule) bool {
	ts, err := a.store.ListTopUps(ctx, r.AccountID, 5)
	if err != nil {
		log.Warn("top-up: listing the account's top-ups", zap.Error(err))
		return true
	}
	for _, t := range ts {
		if t.Status != ledger.TopUpPending {
			continue
		}
		if t.PaymentIntent == "" && now().Sub(t.Created) >= topUpRetryAfter {
			if pkg, ok := a.packageBy[t.Package]; ok {
				log.Info("top-up: sending the charge of a pending top-up again", zap.String("topup", t.ID))
				a.chargeTopUp(ctx, log, r, t, pkg)
			}
		}
		return true
	}
	return false
}

// chargeTopUp makes the top-up's off-session PaymentIntent. Its idempotency key is the top-up's
// id, so a second call for one top-up (a retry) charges once. A decline or a payment that needs
// the customer fails the top-up and pauses the rule; an error that says nothing about the card
// (network, Stripe down) leaves it pending for the sweep to send again.
func (a *app) chargeTopUp(ctx context.Context, log *zap.Logger, r ledger.TopUpRule, t ledger.TopUp, pkg Package) {
	log = log.With(zap.String("topup", t.ID))
	params := &stripe.PaymentIntentCreateParams{
		Amount:        stripe.Int64(pkg.PriceCents),
		Currency:      stripe.String("eur"),
		Customer:      stripe.String(r.Card.CustomerID),
		PaymentMethod: stripe.String(r.Card.PaymentMethodID),
		OffSession:    stripe.Bool(true),
		Confirm:       stripe.Bool(true),
		Description:   stripe.String(strconv.FormatInt(pkg.Credits, 10) + " credits (automatic top-up)"),
		Metadata: map[string]string{
			"topup_id":    t.ID,
			"account_id":  t.AccountID,
			"package":     pkg.ID,
			"credits":     strconv.FormatInt(pkg.Credits, 10),
			"price_cents": strconv.FormatInt(pkg.PriceCents, 10),
		},
	}
	if pkg.Expires > 0 {
		params.Metadata["expires_seconds"] = strconv.FormatInt(int64(time.Duration(pkg.Expires)/time.Second), 10)
	}
	params.SetIdempotencyKey(t.ID)
	pi, err := a.stripe.V1PaymentIntents.Create(ctx, params)
	if err != nil {
		var se *stripe.Error
		if !errors.As(err, &se) || se.Type != stripe.ErrorTypeCard {
			log.Warn("top-up: the payment could not be sent; the sweep sends it again", zap.Error(err))
			return
		}
		status, why := ledger.TopUpFailed, "Your card was declined: "+se.Msg
		if se.Code == stripe.ErrorCodeAuthenticationRequired || (se.PaymentIntent != nil && se.PaymentIntent.Status == stripe.PaymentIntentStatusRequiresAction) {
			status, why = ledger.TopUpNeedsAction, "Your bank asks you to confirm this payment. Save your card again to confirm it for automatic top-ups."
		}
		if se.PaymentIntent != nil && se.PaymentIntent.ID != "" {
			a.store.SetTopUpPaymentIntent(ctx, t.ID, se.PaymentIntent.ID)
		}
		log.Info("top-up: the payment was refused", zap.String("code", string(se.Code)), zap.String("decline_code", string(se.DeclineCode)))
		a.finishTopUp(ctx, log, t.ID, status, why)
		return
	}
	if _, err := a.store.SetTopUpPaymentIntent(ctx, t.ID, pi.ID); err != nil {
		log.Warn("top-up: recording the payment intent", zap.String("payment_intent", pi.ID), zap.Error(err))
	}
	log.Info("top-up payment sent", zap.String("payment_intent", pi.ID), zap.String("status", string(pi.Status)))
	if pi.Status == stripe.PaymentIntentStatusRequiresAction {
		a.finishTopUp(ctx, log, t.ID, ledger.TopUpNeedsAction,
			"Your bank asks you to confirm this payment. Save your card again to confirm it for automatic top-ups.")
	}
	// succeeded or processing: the webhook's payment_intent.succeeded credits it.
}

// finishTopUp ends a top-up that failed or needs the customer: the ledger pauses the rule, and
// the account gets one e-mail (only the call that changed the top-up sends it).
func (a *app) finishTopUp(ctx context.Context, log *zap.Logger, id, status, why string) {
	t, changed, err := a.store.FinishTopUp(ctx, id, status, why)
	if err != nil {
		log.Error("top-up: recording its failure", zap.Error(err))
		return
	}
	if !changed {
		return
	}
	a.ruleChanged(ledger.TopUpRule{AccountID: t.AccountID})
	a.topUpEvent(ctx, t.AccountID, "topup.failed", t)
	a.mailTopUpFailed(ctx, log, t.AccountID, why)
}

// mailTopUpFailed e-mails the account that its top-up is paused, with the link to the top-up page.
func (a *app) mailTopUpFailed(ctx context.Context, log *zap.Logger, acctID, why string) {
	if a.mail == nil {
		return
	}
	acct, err := a.store.GetAccount(ctx, acctID)
	if err != nil {
		log.Error("top-up: reading the account to e-mail it", zap.Error(err))
		return
	}
	if err := a.queueMail(ctx, acct, "topup_failed", mailData{Link: a.publicURL + a.prefix + "/topup", Reason: why}); err != nil {
		log.Error("top-up: queueing the e-mail", zap.Error(err))
	}
}

// topUpEvent reports a top-up that succeeded ("topup.succeeded") or failed ("topup.failed") to
// the account's alert endpoints (alerts.go); the event's id is the top-up's and the kind's.
func (a *app) topUpEvent(ctx context.Context, accountID, kind string, t ledger.TopUp) {
	a.logger.Info("top-up event", zap.String("kind", kind), zap.String("account", accountID), zap.String("topup", t.ID),
		zap.String("status", t.Status), zap.String("package", t.Package), zap.String("payment_intent", t.PaymentIntent))
	data := map[string]any{"id": t.ID, "package": t.Package, "status": t.Status, "payment_intent": t.PaymentIntent}
	if p, ok := a.packageBy[t.Package]; ok {
		data["credits"], data["amount_cents"], data["currency"] = p.Credits, p.PriceCents, "EUR"
	}
	if t.Detail != "" {
		data["reason"] = t.Detail
	}
	_ = a.raiseAlert(ctx, accountID, kind, t.ID+"\x00"+kind, data)
}
