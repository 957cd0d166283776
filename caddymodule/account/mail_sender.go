package account

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	gomail "github.com/wneessen/go-mail"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// The sender: one goroutine per account area with smtp, started with the area (the textgen
// app's Start) and stopped in its Cleanup. It claims due messages from the ledger's outbox
// under a lease, delivers them over SMTP and marks them sent; a failed delivery is retried
// with exponential backoff. It also runs the low-balance check (low_balance.go).

// The sender's timing; tests shorten them.
var (
	// mailPoll is how often the sender looks for due messages it was not woken for (retries,
	// messages queued by other instances).
	mailPoll = 2 * time.Second
	// mailRetryBase is the first retry's delay; each further one doubles, up to mailRetryMax.
	mailRetryBase = 5 * time.Second
	mailRetryMax  = 15 * time.Minute
	// lowBalanceEvery is how often the low-balance check runs.
	lowBalanceEvery = time.Minute
)

// mailBatch is how many messages one claim takes.
const mailBatch = 5

// startMail starts the sender.
func (a *app) startMail() {
	m := a.mail
	m.store = a.store
	m.wake, m.stop, m.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go a.runSender()
}

// stopMail stops the sender and waits for it; a message it was sending is left to its lease.
func (a *app) stopMail() {
	if a.mail == nil || a.mail.stop == nil {
		return
	}
	select {
	case <-a.mail.stop:
	default:
		close(a.mail.stop)
	}
	<-a.mail.done
}

func (a *app) runSender() {
	m := a.mail
	defer close(m.done)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-m.stop; cancel() }()
	client, err := a.smtpClient()
	if err != nil { // Validate checked the settings; this is not expected
		a.logger.Error("e-mail is off: the SMTP client", zap.Error(err))
		return
	}
	poll := time.NewTicker(mailPoll)
	defer poll.Stop()
	low := time.NewTicker(lowBalanceEvery)
	defer low.Stop()
	for {
		a.deliverDue(ctx, client)
		select {
		case <-m.stop:
			return
		case <-m.wake:
		case <-poll.C:
		case <-low.C:
			a.checkLowBalances(ctx)
		}
	}
}

// smtpClient builds the go-mail client of the settings.
func (a *app) smtpClient() (*gomail.Client, error) {
	s := a.mail.smtp
	opts := []gomail.Option{gomail.WithPort(s.Port), gomail.WithTimeout(time.Duration(s.Timeout))}
	switch s.Security {
	case "tls":
		opts = append(opts, gomail.WithSSL())
	case "none":
		opts = append(opts, gomail.WithTLSPolicy(gomail.NoTLS))
	default:
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory))
	}
	if s.Security != "none" {
		opts = append(opts, gomail.WithTLSConfig(&tls.Config{ServerName: s.Host, RootCAs: a.mail.tlsRoots, MinVersion: tls.VersionTLS12}))
	}
	if s.Username != "" {
		opts = append(opts, gomail.WithSMTPAuth(gomail.SMTPAuthAutoDiscover),
			gomail.WithUsername(s.Username), gomail.WithPassword(s.Password))
	}
	return gomail.NewClient(s.Host, opts...)
}

// mailUsefulFor is how long after it was queued a message of kind is still worth sending: as
// long as the link it carries works (a reset link of an hour ago would only tell the customer
// that it expired), a week for a refund's or a dispute's notice, and a day for a low-balance
// alert (the balance has changed since).
func mailUsefulFor(kind string) time.Duration {
	switch kind {
	case "verify":
		return verifyTTL
	case "reset":
		return resetTTL
	case "invite":
		return inviteTTL
	case "refund", "dispute", "topup_failed":
		// About money, and still true a week later: a dispute must be answered within days.
		return mailUsefulMoney
	}
	return mailUsefulOther
}

// mailUsefulMoney is how long a refund's or dispute's notice is worth sending.
const mailUsefulMoney = 7 * 24 * time.Hour

// mailUsefulOther is how long a message without a link (a low-balance alert) is worth sending.
const mailUsefulOther = 24 * time.Hour

// giveUpMail drops a message that was not delivered while it was worth sending (the SMTP server
// was down or refused it all along): the customer asks for a new link, and the operator learns
// from the warning that e-mail did not go out.
func (a *app) giveUpMail(ctx context.Context, log *zap.Logger, msg ledger.MailMessage, useful time.Duration) {
	err := a.mail.store.DropMail(ctx, msg.ID)
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		log.Warn("an e-mail is no longer worth sending, but dropping it failed; it is tried again after its lease", zap.Error(err))
		return
	}
	log.Warn("an e-mail was given up: it was not delivered while it was worth sending (the link it carries has expired, or an alert is a day old)",
		zap.Duration("useful_for", useful), zap.Time("queued", msg.Created), zap.String("last_error", msg.LastError))
}

// deliverDue sends what is due until the outbox has nothing more for now.
func (a *app) deliverDue(ctx context.Context, client *gomail.Client) {
	m := a.mail
	lease := mailBatch*time.Duration(m.smtp.Timeout) + time.Minute
	for ctx.Err() == nil {
		batch, err := m.store.ClaimMail(ctx, lease, mailBatch)
		if err != nil {
			a.logger.Warn("reading the e-mail outbox", zap.Error(err))
			return
		}
		if len(batch) == 0 {
			return
		}
		for _, msg := range batch {
			a.deliver(ctx, client, msg)
		}
	}
}

// deliver sends one claimed message and records the outcome. The message may have left the
// outbox while it was being sent: the operator dropped it (caddy textgen mail drop), or this
// sender held it past its lease and another took it over. Marking or retrying it is then
// ErrNotFound, which is logged as what it is, not as a failure: a dropped message is meant to
// stay gone, and a taken-over one is the other sender's to finish.
func (a *app) deliver(ctx context.Context, client *gomail.Client, msg ledger.MailMessage) {
	m := a.mail
	log := a.logger.With(zap.String("mail", msg.ID), zap.String("kind", msg.Kind), zap.String("account", msg.AccountID), zap.Int("attempt", msg.Attempts))
	bctx := context.WithoutCancel(ctx)
	if useful := mailUsefulFor(msg.Kind); now().Sub(msg.Created) > useful {
		a.giveUpMail(bctx, log, msg, useful)
		return
	}
	err := a.send(ctx, client, msg)
	if err == nil {
		switch merr := m.store.MarkMailSent(bctx, msg.ID, msg.Claim); {
		case merr == nil:
			log.Info("e-mail sent")
		case errors.Is(merr, ledger.ErrNotFound):
			log.Info("e-mail sent; it had left the outbox meanwhile (dropped by the operator, or its lease ran out and another sender took it over)")
		default:
			log.Warn("e-mail sent, but not marked sent", zap.Error(merr))
		}
		return
	}
	delay := mailRetryBase << min(msg.Attempts-1, 20)
	delay = min(delay, mailRetryMax)
	switch rerr := m.store.RetryMail(bctx, msg.ID, msg.Claim, now().Add(delay), err.Error()); {
	case rerr == nil:
		log.Warn("e-mail not sent; retrying later", zap.Error(err), zap.Duration("retry_in", delay))
	case errors.Is(rerr, ledger.ErrNotFound):
		log.Info("e-mail not sent, and not retried by this sender: it had left the outbox meanwhile (dropped by the operator, or its lease ran out and another sender took it over)", zap.Error(err))
	default:
		log.Warn("e-mail not sent; noting the failure failed too, so it is retried when its lease runs out", zap.Error(err), zap.NamedError("noting", rerr))
	}
}

// send opens and delivers one message. The Message-ID is the outbox id, so that a receiving
// system can tell a repeat from a new message.
func (a *app) send(ctx context.Context, client *gomail.Client, msg ledger.MailMessage) error {
	m := a.mail
	plain, err := m.sealer.Open(msg.Sealed, mailAD(msg.AccountID, msg.Kind))
	if err != nil {
		return fmt.Errorf("opening the queued message (was it queued by an instance with another mail_key?): %w", err)
	}
	var out outgoing
	if err := json.Unmarshal(plain, &out); err != nil {
		return fmt.Errorf("reading the queued message: %w", err)
	}
	g := gomail.NewMsg()
	if err := g.From(m.smtp.From); err != nil {
		return err
	}
	if err := g.To(out.To); err != nil {
		return err
	}
	g.Subject(out.Subject)
	g.SetDate()
	domain := "textgen.invalid"
	if _, d, ok := strings.Cut(m.smtp.From, "@"); ok {
		domain = strings.TrimRight(d, "> ")
	}
	g.SetMessageIDWithValue(msg.ID + "@" + domain)
	g.SetGenHeader("Auto-Submitted", "auto-generated")
	g.SetBodyString(gomail.TypeTextPlain, out.Text)
	if out.HTML != "" {
		g.AddAlternativeString(gomail.TypeTextHTML, out.HTML)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Duration(m.smtp.Timeout))
	defer cancel()
	return client.DialAndSendWithContext(sctx, g)
}
