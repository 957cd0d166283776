package account

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// The Alerts page: an account's HTTPS endpoints for events, the secret of a new one shown once,
// and its recent deliveries with their last status. Owners and admins of an organisation manage
// them (they see its credits and purchases, which the events tell of); members do not.

func (a *app) alertRoutes(m *http.ServeMux) {
	p := a.prefix
	m.HandleFunc("GET "+p+"/webhooks", a.authed(a.needs(ledger.RoleAdmin, a.alertsPage)))
	m.HandleFunc("POST "+p+"/webhooks", a.authedPost(a.needs(ledger.RoleAdmin, a.addAlertEndpoint)))
	m.HandleFunc("POST "+p+"/webhooks/delete", a.authedPost(a.needs(ledger.RoleAdmin, a.deleteAlertEndpoint)))
}

// alertKindLabels say what each event kind is, on the page.
var alertKindLabels = map[string]string{
	ledger.AlertBalanceLow:        "Credits fell below the low-balance alert",
	ledger.AlertKeyBudget80:       "A key has spent 80% of a budget",
	ledger.AlertKeyBudget100:      "A key has spent a budget",
	ledger.AlertMemberCapReached:  "A member reached their monthly cap",
	ledger.AlertPurchaseCompleted: "A purchase was credited",
	ledger.AlertRefundCreated:     "A purchase was refunded",
	ledger.AlertDisputeCreated:    "A payment was disputed",
	ledger.AlertDisputeClosed:     "A dispute was decided",
	ledger.AlertTopupSucceeded:    "An automatic top-up was charged",
	ledger.AlertTopupFailed:       "An automatic top-up failed",
}

type alertKindOption struct {
	Kind, Label string
	Checked     bool
}

type alertEndpointView struct {
	ID, URL string
	Kinds   string // "all events" or the kinds, comma-separated
	Created string
}

type alertDeliveryView struct {
	Event, Kind, Endpoint, Created, Status, LastError string
	LastStatus                                        int
}

type alertsData struct {
	On         bool
	Kinds      []alertKindOption
	URL        string
	Endpoints  []alertEndpointView
	Deliveries []alertDeliveryView
	NewSecret  string // shown once, right after the endpoint is added
	NewURL     string
	Full       bool
}

// alertsPage shows the page; errMsg, url and kinds are a refused form's.
func (a *app) alertsPage(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	p := sc.page("Alerts", "alerts")
	switch {
	case r.URL.Query().Has("deleted"):
		p.Flash = "The endpoint is deleted. It gets no more events."
	}
	a.renderAlerts(w, r, sc, p, http.StatusOK, alertsData{})
}

func (a *app) renderAlerts(w http.ResponseWriter, r *http.Request, sc *sessionCtx, p page, status int, d alertsData) {
	d.On = a.alerts != nil
	checked := map[string]bool{}
	for _, k := range d.Kinds {
		checked[k.Kind] = k.Checked
	}
	d.Kinds = nil
	for _, k := range ledger.AlertKinds {
		d.Kinds = append(d.Kinds, alertKindOption{Kind: k, Label: alertKindLabels[k], Checked: checked[k]})
	}
	if d.On {
		eps, err := a.store.ListAlertEndpoints(r.Context(), sc.acct.ID)
		if err != nil {
			a.internalError(w, r, sc, "listing alert endpoints", err)
			return
		}
		urls := map[string]string{}
		for _, e := range eps {
			kinds := "all events"
			if len(e.Kinds) > 0 {
				kinds = strings.Join(e.Kinds, ", ")
			}
			urls[e.ID] = e.URL
			d.Endpoints = append(d.Endpoints, alertEndpointView{ID: e.ID, URL: e.URL, Kinds: kinds, Created: e.Created.UTC().Format("2006-01-02 15:04")})
		}
		d.Full = len(eps) >= ledger.MaxAlertEndpoints
		ds, err := a.store.ListAlertDeliveries(r.Context(), sc.acct.ID, 50)
		if err != nil {
			a.internalError(w, r, sc, "listing alert deliveries", err)
			return
		}
		for _, x := range ds {
			d.Deliveries = append(d.Deliveries, alertDeliveryView{Event: x.EventID, Kind: x.Kind, Endpoint: urls[x.EndpointID],
				Created: x.Created.UTC().Format("2006-01-02 15:04:05"), Status: deliveryStatus(x), LastStatus: x.LastStatus, LastError: x.LastError})
		}
	}
	p.Data = d
	a.render(w, r, status, "alerts", p)
}

// deliveryStatus says where a delivery stands, in words.
func deliveryStatus(d ledger.AlertDelivery) string {
	switch d.State {
	case ledger.AlertDelivered:
		return "delivered"
	case ledger.AlertFailed:
		return fmt.Sprintf("failed (given up after %d attempts)", d.Attempts)
	}
	if d.Attempts == 0 {
		return "waiting to be sent"
	}
	return fmt.Sprintf("retrying (attempt %d failed, next at %s UTC)", d.Attempts, d.NextAttempt.UTC().Format("2006-01-02 15:04:05"))
}

// addAlertEndpoint registers the endpoint of the form and shows its secret, once.
func (a *app) addAlertEndpoint(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	p := sc.page("Alerts", "alerts")
	raw := strings.TrimSpace(r.PostFormValue("url"))
	var kinds []string
	var opts []alertKindOption
	for _, k := range r.PostForm["kind"] {
		if !slices.Contains(ledger.AlertKinds, k) {
			p.Error = "Choose events from the list."
			a.renderAlerts(w, r, sc, p, http.StatusBadRequest, alertsData{URL: raw})
			return
		}
		kinds = append(kinds, k)
		opts = append(opts, alertKindOption{Kind: k, Checked: true})
	}
	refuse := func(status int, msg string) {
		p.Error = msg
		a.renderAlerts(w, r, sc, p, status, alertsData{URL: raw, Kinds: opts})
	}
	e, secret, err := a.AddAlertEndpoint(r.Context(), sc.acct.ID, raw, kinds)
	switch {
	case errors.Is(err, errAlertsOff):
		refuse(http.StatusForbidden, "This service sends no alerts.")
		return
	case errors.Is(err, ledger.ErrTooManyAlertEndpoints):
		refuse(http.StatusConflict, fmt.Sprintf("You have %d endpoints, the most allowed. Delete one first.", ledger.MaxAlertEndpoints))
		return
	case errors.Is(err, ledger.ErrInvalidArgument):
		var rf *endpointRefused
		if errors.As(err, &rf) {
			refuse(http.StatusBadRequest, rf.msg)
		} else {
			refuse(http.StatusBadRequest, "Enter a URL such as https://example.com/textgen-events.")
		}
		return
	case err != nil:
		a.internalError(w, r, sc, "adding an alert endpoint", err)
		return
	}
	a.logger.Info("alert endpoint added", zap.String("account", sc.acct.ID), zap.String("login", sc.login.ID), zap.String("endpoint", e.ID))
	p.Flash = "The endpoint is added. Copy its signing secret now: it is not shown again."
	w.Header().Set("Cache-Control", "no-store")
	a.renderAlerts(w, r, sc, p, http.StatusOK, alertsData{NewSecret: secret, NewURL: e.URL})
}

// errAlertsOff: the operator turned alerts off.
var errAlertsOff = errors.New("alerts are off (alerts off in textgen_account)")

// endpointRefused is a URL the alerts settings refuse, with why in a sentence.
type endpointRefused struct{ msg string }

func (e *endpointRefused) Error() string        { return e.msg }
func (e *endpointRefused) Is(target error) bool { return target == ledger.ErrInvalidArgument }

// AddAlertEndpoint checks url (https, and public unless private endpoints are allowed), makes
// a signing secret, seals it and registers the endpoint; the page and the admin API
// (textgenapp.AlertEndpoints) both add endpoints through it.
func (a *app) AddAlertEndpoint(ctx context.Context, accountID, url string, kinds []string) (ledger.AlertEndpoint, string, error) {
	if a.alerts == nil {
		return ledger.AlertEndpoint{}, "", errAlertsOff
	}
	url = strings.TrimSpace(url)
	if msg := endpointProblem(ctx, url, a.alerts.allowPrivate); msg != "" {
		return ledger.AlertEndpoint{}, "", &endpointRefused{msg}
	}
	secret := newAlertSecret()
	e, err := a.store.CreateAlertEndpoint(ctx, ledger.AlertEndpoint{AccountID: accountID, URL: url, Kinds: kinds,
		SealedSecret: a.alerts.sealer.Seal([]byte(secret), alertSecretAD(accountID))})
	if err != nil {
		return e, "", err
	}
	return e, secret, nil
}

// deleteAlertEndpoint deletes one of the account's endpoints.
func (a *app) deleteAlertEndpoint(w http.ResponseWriter, r *http.Request, sc *sessionCtx) {
	id := r.PostFormValue("id")
	err := a.store.DeleteAlertEndpoint(r.Context(), sc.acct.ID, id)
	if errors.Is(err, ledger.ErrNotFound) {
		p := sc.page("Alerts", "alerts")
		p.Error = "That endpoint does not exist (was it deleted already?)."
		a.renderAlerts(w, r, sc, p, http.StatusNotFound, alertsData{})
		return
	}
	if err != nil {
		a.internalError(w, r, sc, "deleting an alert endpoint", err)
		return
	}
	a.logger.Info("alert endpoint deleted", zap.String("account", sc.acct.ID), zap.String("login", sc.login.ID), zap.String("endpoint", id))
	http.Redirect(w, r, a.prefix+"/webhooks?deleted=1", http.StatusSeeOther)
}
