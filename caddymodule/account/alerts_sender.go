package account

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// The alert sender: one goroutine per account area with alerts on, started with the area and
// stopped in its Cleanup. It claims due deliveries from the ledger under a lease, POSTs each
// signed event, and marks it delivered (2xx) or retries it with exponential back-off; a
// delivery not made within alertGiveUpAfter of its event is given up and shown as failed. It
// also runs the checks that raise alerts off the requests' path (key budgets, member caps;
// the low-balance check too when the area sends no e-mail, whose sender runs it otherwise).

// The sender's timing; tests shorten or lengthen them.
var (
	// alertPoll is how often the sender looks for due deliveries it was not woken for.
	alertPoll = 2 * time.Second
	// alertRetryBase is the first retry's delay; each further one doubles, up to alertRetryMax.
	alertRetryBase = time.Minute
	alertRetryMax  = time.Hour
)

const (
	// alertTimeout bounds one delivery: connecting, the TLS handshake, the answer.
	alertTimeout = 10 * time.Second
	// alertGiveUpAfter is how long after its event a delivery is tried.
	alertGiveUpAfter = 24 * time.Hour
	// alertBatch is how many deliveries one claim takes.
	alertBatch = 5
)

// startAlerts starts the sender.
func (a *app) startAlerts() {
	al := a.alerts
	al.wake, al.stop, al.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go a.runAlerts()
}

// stopAlerts stops the sender and waits for it; a delivery it was making is left to its lease.
func (a *app) stopAlerts() {
	if a.alerts == nil || a.alerts.stop == nil {
		return
	}
	select {
	case <-a.alerts.stop:
	default:
		close(a.alerts.stop)
	}
	<-a.alerts.done
}

func (a *app) runAlerts() {
	al := a.alerts
	defer close(al.done)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-al.stop; cancel() }()
	client := a.alertClient()
	poll := time.NewTicker(alertPoll)
	defer poll.Stop()
	checks := time.NewTicker(lowBalanceEvery)
	defer checks.Stop()
	for {
		a.deliverAlerts(ctx, client)
		select {
		case <-al.stop:
			return
		case <-al.wake:
		case <-poll.C:
		case <-checks.C:
			a.checkAlertCrossings(ctx)
		}
	}
}

// alertClient is the client of the deliveries: a 10 s timeout, no redirects followed (a 3xx is
// a failed delivery), no proxy, and, unless private endpoints are allowed, the dial-time guard
// (alerts_ssrf.go).
func (a *app) alertClient() *http.Client {
	d := &net.Dialer{Timeout: alertTimeout}
	if !a.alerts.allowPrivate {
		d.Control = guardControl
	}
	tr := &http.Transport{
		DialContext:           d.DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: a.alerts.roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   alertTimeout,
		ResponseHeaderTimeout: alertTimeout,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          20,
		IdleConnTimeout:       time.Minute,
	}
	return &http.Client{Transport: tr, Timeout: alertTimeout, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}

// deliverAlerts sends what is due until nothing more is due now.
func (a *app) deliverAlerts(ctx context.Context, client *http.Client) {
	lease := alertBatch*alertTimeout + time.Minute
	for ctx.Err() == nil {
		batch, err := a.store.ClaimAlertDeliveries(ctx, lease, alertBatch)
		if err != nil {
			if ctx.Err() == nil {
				a.logger.Warn("reading the alert outbox", zap.Error(err))
			}
			return
		}
		if len(batch) == 0 {
			return
		}
		for _, d := range batch {
			a.deliverAlert(ctx, client, d)
		}
	}
}

// deliverAlert sends one claimed delivery and records the outcome. The endpoint's URL and its
// secret are never logged: a URL may carry a token of the receiver's.
func (a *app) deliverAlert(ctx context.Context, client *http.Client, d ledger.AlertDelivery) {
	log := a.logger.With(zap.String("delivery", d.ID), zap.String("event", d.EventID), zap.String("kind", d.Kind),
		zap.String("account", d.AccountID), zap.Int("attempt", d.Attempts))
	bctx := context.WithoutCancel(ctx)
	status, err := a.postAlert(ctx, client, d)
	if ctx.Err() != nil {
		return // stopping: the delivery is tried again when its lease runs out
	}
	if err == nil {
		switch merr := a.store.MarkAlertDelivered(bctx, d.ID, d.Claim, status); {
		case merr == nil:
			log.Info("alert delivered", zap.Int("status", status))
		case errors.Is(merr, ledger.ErrNotFound):
			log.Info("alert delivered; it had left the outbox meanwhile (its endpoint was deleted, or its lease ran out)")
		default:
			log.Warn("alert delivered, but not marked delivered: it may be delivered again", zap.Error(merr))
		}
		return
	}
	t := now()
	last := d.Created.Add(alertGiveUpAfter)
	if !t.Before(last) {
		if gerr := a.store.GiveUpAlertDelivery(bctx, d.ID, d.Claim, status, err.Error()); gerr != nil && !errors.Is(gerr, ledger.ErrNotFound) {
			log.Warn("alert not delivered for a day; giving it up failed, so it is tried again after its lease", zap.Error(gerr))
			return
		}
		log.Warn("alert given up: not delivered within a day of its event", zap.Int("status", status), zap.Error(err))
		return
	}
	delay := min(alertRetryBase<<min(d.Attempts-1, 20), alertRetryMax)
	at := t.Add(delay)
	if at.After(last) {
		at = last // the last try is at the end of the day
	}
	switch rerr := a.store.RetryAlertDelivery(bctx, d.ID, d.Claim, at, status, err.Error()); {
	case rerr == nil:
		log.Info("alert not delivered; retrying later", zap.Int("status", status), zap.Error(err), zap.Time("next", at))
	case errors.Is(rerr, ledger.ErrNotFound):
		log.Info("alert not delivered, and not retried by this sender: it had left the outbox meanwhile", zap.Error(err))
	default:
		log.Warn("alert not delivered; noting the failure failed too, so it is retried when its lease runs out", zap.Error(err), zap.NamedError("noting", rerr))
	}
}

// postAlert POSTs one delivery, signed, and returns the receiver's status (0: none) and why it
// does not count as delivered (nil: a 2xx). Errors name no URL.
func (a *app) postAlert(ctx context.Context, client *http.Client, d ledger.AlertDelivery) (int, error) {
	secret, err := a.alerts.sealer.Open(d.SealedSecret, alertSecretAD(d.AccountID))
	if err != nil {
		return 0, errors.New("the endpoint's secret cannot be opened (was it made by an instance with another mail_key?)")
	}
	u, err := url.Parse(d.URL)
	if err != nil || u.Scheme != "https" {
		return 0, errors.New("the endpoint's URL is not https://")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(d.Payload))
	if err != nil {
		return 0, errors.New("the endpoint's URL is not valid")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "caddy-textgen-alerts/1")
	req.Header.Set("Textgen-Event-Id", d.EventID)
	req.Header.Set("Textgen-Signature", signAlert(string(secret), now(), d.Payload))
	res, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL
		}
		if errors.Is(err, errPrivateEndpoint) {
			return 0, fmt.Errorf("refused: %w", errPrivateEndpoint)
		}
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return res.StatusCode, fmt.Errorf("the endpoint answered HTTP %d", res.StatusCode)
	}
	return res.StatusCode, nil
}
