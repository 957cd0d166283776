package account

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/stripe/stripe-go/v82"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// The top-up page of My Account (owners, as buying is): the saved card and "Save a card" /
// "Change the card" (a Stripe Checkout Session in setup mode: the card is entered on Stripe's
// page, and the webhook saves it, webhook_topup.go), the rule's form, the state (paused and
// why) and this month's top-ups.

type topUpData struct {
	Rule     ledger.TopUpRule
	HasRule  bool
	Packages []Package
	TopUps   []ledger.TopUp
	// Month is this month's count of top-ups that count against the cap.
	Month int
	// Form holds what was sent when the form is shown again with an error.
	Threshold, Package, MonthlyCap string
}

func (a *app) topUpPage(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	flash := ""
	switch r.URL.Query().Get("saved") {
	case "rule":
		flash = "Your automatic top-up is saved."
	case "card":
		flash = "Thank you. Your card is being saved; it shows here once Stripe confirms it (reload in a moment)."
	}
	a.renderTopUp(w, r, sc, http.StatusOK, flash, "", nil)
}

// renderTopUp shows the top-up page with a flash or an error; form is what was sent.
func (a *app) renderTopUp(w http.ResponseWriter, r *http.Request, sc *sessionCtx, status int, flash, msg string, form *topUpData) {
	if a.topUps == nil {
		a.errorPage(w, r, sc, http.StatusNotFound, "Automatic top-up is not available",
			"This service does not offer automatic top-up. You can buy credits on the Buy credits page.")
		return
	}
	d := topUpData{Packages: a.packages}
	rule, err := a.store.TopUpRule(r.Context(), sc.acct.ID)
	switch {
	case err == nil:
		d.Rule, d.HasRule = rule, true
	case !errors.Is(err, ledger.ErrNotFound):
		a.internalError(w, r, sc, "reading the top-up rule", err)
		return
	}
	ts, err := a.store.ListTopUps(r.Context(), sc.acct.ID, 50)
	if err != nil {
		a.internalError(w, r, sc, "listing top-ups", err)
		return
	}
	month := ledger.TopUpMonth(now())
	for _, t := range ts {
		if t.Month == month {
			d.TopUps = append(d.TopUps, t)
			if t.Status == ledger.TopUpSucceeded || t.Status == ledger.TopUpPending {
				d.Month++
			}
		}
	}
	d.Threshold, d.Package, d.MonthlyCap = "", "", ""
	if d.HasRule && d.Rule.Threshold > 0 {
		d.Threshold, d.Package, d.MonthlyCap = strconv.FormatInt(d.Rule.Threshold, 10), d.Rule.Package, strconv.Itoa(d.Rule.MonthlyCap)
	}
	if form != nil {
		d.Threshold, d.Package, d.MonthlyCap = form.Threshold, form.Package, form.MonthlyCap
	}
	p := sc.page("Automatic top-up", "buy")
	p.Flash, p.Error, p.Data = flash, msg, d
	a.render(w, r, status, "topup", p)
}

// saveTopUpRule saves the rule's form.
func (a *app) saveTopUpRule(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	if a.topUps == nil {
		a.renderTopUp(w, r, sc, http.StatusNotFound, "", "", nil)
		return
	}
	form := &topUpData{Threshold: strings.TrimSpace(r.PostFormValue("threshold")), Package: r.PostFormValue("package"),
		MonthlyCap: strings.TrimSpace(r.PostFormValue("monthly_cap"))}
	bad := func(msg string) { a.renderTopUp(w, r, sc, http.StatusBadRequest, "", msg, form) }
	n, err := strconv.ParseInt(form.Threshold, 10, 64)
	if err != nil || n < 1 || n > ledger.MaxTopUpThreshold {
		bad("Enter the number of credits under which to top up: a whole number from 1 to 1000000000.")
		return
	}
	if _, ok := a.packageBy[form.Package]; !ok {
		bad("Choose one of the packages listed.")
		return
	}
	k, err := strconv.Atoi(form.MonthlyCap)
	if err != nil || k < 1 || k > ledger.MaxTopUpCap {
		bad("Enter how many top-ups a month at most: a whole number from 1 to 1000.")
		return
	}
	enabled := r.PostFormValue("enabled") == "on"
	rule, err := a.store.SetTopUpRule(r.Context(), sc.acct.ID, ledger.TopUpSettings{Threshold: n, Package: form.Package, MonthlyCap: k, Enabled: enabled})
	if err != nil {
		a.internalError(w, r, sc, "saving the top-up rule", err)
		return
	}
	a.ruleChanged(rule)
	a.logger.Info("top-up rule saved", zap.String("account", sc.acct.ID), zap.String("by", sc.login.ID), zap.Int64("threshold", n),
		zap.String("package", form.Package), zap.Int("monthly_cap", k), zap.Bool("enabled", enabled))
	http.Redirect(w, r, a.prefix+"/topup?saved=rule", http.StatusSeeOther)
}

// saveCard sends the browser to a Stripe Checkout Session in setup mode for the account's
// customer (made now the first time).
func (a *app) saveCard(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	if a.topUps == nil {
		a.renderTopUp(w, r, sc, http.StatusNotFound, "", "", nil)
		return
	}
	customer := ""
	if rule, err := a.store.TopUpRule(r.Context(), sc.acct.ID); err == nil {
		customer = rule.Card.CustomerID
	} else if !errors.Is(err, ledger.ErrNotFound) {
		a.internalError(w, r, sc, "reading the top-up rule", err)
		return
	}
	unreachable := func(what string, err error) {
		a.logger.Error(what, zap.String("account", sc.acct.ID), zap.Error(err))
		a.errorPage(w, r, sc, http.StatusBadGateway, "Card page not available",
			"The payment provider could not be reached. Nothing was changed; please try again in a moment.")
	}
	if customer == "" {
		c, err := a.stripe.V1Customers.Create(r.Context(), &stripe.CustomerCreateParams{
			Email:    stripe.String(sc.acct.Email),
			Metadata: map[string]string{"account_id": sc.acct.ID},
		})
		if err != nil {
			unreachable("creating a Stripe customer", err)
			return
		}
		customer = c.ID
	}
	base := a.baseURL(r) + a.prefix
	cs, err := a.stripe.V1CheckoutSessions.Create(r.Context(), &stripe.CheckoutSessionCreateParams{
		Mode:              stripe.String(string(stripe.CheckoutSessionModeSetup)),
		Customer:          stripe.String(customer),
		Currency:          stripe.String("eur"),
		ClientReferenceID: stripe.String(sc.acct.ID),
		SuccessURL:        stripe.String(base + "/topup?saved=card"),
		CancelURL:         stripe.String(base + "/topup"),
		Metadata:          map[string]string{"purpose": "topup_card", "account_id": sc.acct.ID},
	})
	if err != nil || cs.URL == "" {
		unreachable("creating a Stripe Checkout Session in setup mode", err)
		return
	}
	a.logger.Info("card checkout session created", zap.String("account", sc.acct.ID), zap.String("checkout_session", cs.ID))
	http.Redirect(w, r, cs.URL, http.StatusSeeOther)
}
