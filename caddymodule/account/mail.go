package account

import (
	"bytes"
	"cmp"
	"context"
	"crypto/x509"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io/fs"
	"net/mail"
	"os"
	"path/filepath"
	"strings"
	texttemplate "text/template"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/caddymodule/internal/sealing"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// E-mail of the account area: address verification, password reset, invitations, the
// low-balance alert, the customer's refund notice and the operator's notice of a new dispute. A request never waits for SMTP: it renders the message, seals it (the
// message may carry a live link) and queues it in the ledger's outbox (ledger.Mail); the
// sender (mail_sender.go) delivers it, retrying with backoff, and on a shared PostgreSQL
// ledger several instances drain one queue without sending a message twice.

// SMTP is the server My Account sends its e-mail through.
type SMTP struct {
	// Host is the SMTP server's name or address. Required.
	Host string `json:"host,omitempty"`
	// Port is the SMTP server's port. Default: 587 with starttls, 465 with tls, 25 with none.
	Port int `json:"port,omitempty"`
	// Security is "starttls" (the connection must be upgraded to TLS), "tls" (TLS from the
	// start) or "none" (plain text: only for a relay on the same host, or tests). Default:
	// starttls.
	Security string `json:"security,omitempty"`
	// Username logs in to the SMTP server; placeholders such as {env.SMTP_USER} are resolved
	// at start. Default: no login.
	Username string `json:"username,omitempty"`
	// Password of Username; placeholders such as {env.SMTP_PASSWORD} are resolved at start,
	// and it is never logged. Default: none.
	Password string `json:"password,omitempty"`
	// From is the sender, an address with an optional name ("Text API <no-reply@example.com>").
	// Required.
	From string `json:"from,omitempty"`
	// Timeout bounds the delivery of one message. Default: 30s.
	Timeout caddy.Duration `json:"timeout,omitempty"`
}

const (
	defaultMailTimeout = 30 * time.Second
	verifyTTL          = 48 * time.Hour
	resetTTL           = time.Hour
	inviteTTL          = 7 * 24 * time.Hour
)

// Validate names the field that is wrong.
func (s *SMTP) Validate() error {
	if strings.TrimSpace(s.Host) == "" {
		return errors.New("textgen_account: smtp: host is required")
	}
	if s.Port < 0 || s.Port > 65535 {
		return fmt.Errorf("textgen_account: smtp: port %d is not a port", s.Port)
	}
	switch s.Security {
	case "", "starttls", "tls", "none":
	default:
		return fmt.Errorf("textgen_account: smtp: security %q must be starttls, tls or none", s.Security)
	}
	if _, err := mail.ParseAddress(s.From); err != nil {
		return fmt.Errorf("textgen_account: smtp: from %q is not an address: %v", s.From, err)
	}
	if s.Timeout < 0 {
		return errors.New("textgen_account: smtp: timeout must not be negative")
	}
	if (s.Username == "") != (s.Password == "") {
		return errors.New("textgen_account: smtp: username and password go together")
	}
	if s.Username != "" && s.Security == "none" {
		return errors.New("textgen_account: smtp: username and password need security starttls or tls: with none the password would cross the network in clear")
	}
	return nil
}

//go:embed mail_templates/*
var mailTemplateFS embed.FS

// mailKinds are the messages the account area sends; each has <kind>.txt (a "Subject:" line,
// an empty line and the plain-text body, text/template) and <kind>.html (the HTML body,
// html/template).
var mailKinds = []string{"verify", "reset", "invite", "low_balance", "refund", "dispute", "org_invite", "topup_failed"}

// mailTemplates are the parsed templates of every kind.
type mailTemplates struct {
	text map[string]*texttemplate.Template
	html map[string]*htmltemplate.Template
}

// loadMailTemplates parses the built-in templates, each replaced by the file of the same name
// in dir if there is one (dir "": the built-in ones only).
func loadMailTemplates(dir string) (*mailTemplates, error) {
	mt := &mailTemplates{text: map[string]*texttemplate.Template{}, html: map[string]*htmltemplate.Template{}}
	read := func(name string) ([]byte, error) {
		if dir != "" {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err == nil {
				return b, nil
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("mail_templates: %w", err)
			}
		}
		return fs.ReadFile(mailTemplateFS, "mail_templates/"+name)
	}
	for _, k := range mailKinds {
		b, err := read(k + ".txt")
		if err != nil {
			return nil, err
		}
		if !bytes.HasPrefix(b, []byte("Subject:")) {
			return nil, fmt.Errorf("mail_templates: %s.txt must start with a Subject: line", k)
		}
		t, err := texttemplate.New(k + ".txt").Option("missingkey=error").Parse(string(b))
		if err != nil {
			return nil, fmt.Errorf("mail_templates: %w", err)
		}
		mt.text[k] = t
		if b, err = read(k + ".html"); err != nil {
			return nil, err
		}
		h, err := htmltemplate.New(k + ".html").Option("missingkey=error").Parse(string(b))
		if err != nil {
			return nil, fmt.Errorf("mail_templates: %w", err)
		}
		mt.html[k] = h
	}
	return mt, nil
}

// mailData is what every mail template gets.
type mailData struct {
	Site, Email, Link, Valid string
	Available, Threshold     int64
	// A refund's or dispute's (refund, dispute): its id, the amount and of what payment total,
	// the purchase's reference and payment id, the account, the credits it took off, Refund
	// "full" or "partial", the provider's reason, the status, the date.
	ID, Amount, Total, Reference, Payment, AccountID string
	Credits                                          int64
	Refund, Reason, Status, Date                     string
}

// outgoing is a rendered message, what is sealed into the outbox.
type outgoing struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	Text    string `json:"text"`
	HTML    string `json:"html"`
}

// render fills kind's templates.
func (mt *mailTemplates) render(kind, to string, d mailData) (outgoing, error) {
	var tb, hb bytes.Buffer
	if err := mt.text[kind].Execute(&tb, d); err != nil {
		return outgoing{}, fmt.Errorf("mail template %s.txt: %w", kind, err)
	}
	if err := mt.html[kind].Execute(&hb, d); err != nil {
		return outgoing{}, fmt.Errorf("mail template %s.html: %w", kind, err)
	}
	head, body, _ := strings.Cut(strings.ReplaceAll(tb.String(), "\r\n", "\n"), "\n")
	subject := strings.TrimSpace(strings.TrimPrefix(head, "Subject:"))
	return outgoing{To: to, Subject: subject, Text: strings.TrimLeft(body, "\n"), HTML: hb.String()}, nil
}

// mailAD binds a sealed message to its account and kind.
func mailAD(acct, kind string) []byte { return []byte("textgen-mail\x00" + acct + "\x00" + kind) }

// mailer queues the account area's e-mail and delivers it (mail_sender.go).
type mailer struct {
	store     accountLedger
	sealer    *sealing.Sealer
	templates *mailTemplates
	smtp      SMTP // defaults set, secrets resolved
	// tlsRoots checks the SMTP server's certificate; nil: the system's roots (tests set it).
	tlsRoots *x509.CertPool
	wake     chan struct{} // tells the sender a message is queued
	stop     chan struct{}
	done     chan struct{}
}

// newMailer prepares the e-mail of an account area whose config has smtp (defaults set,
// placeholders resolved).
func newMailer(smtp SMTP, key []byte, templateDir string) (*mailer, error) {
	s, err := sealing.New(key)
	if err != nil {
		return nil, fmt.Errorf("mail_key: %w", err)
	}
	mt, err := loadMailTemplates(templateDir)
	if err != nil {
		return nil, err
	}
	return &mailer{sealer: s, templates: mt, smtp: smtp}, nil
}

// queueMail renders kind for the account, seals it and puts it in the outbox.
func (a *app) queueMail(ctx context.Context, acct ledger.Account, kind string, d mailData) error {
	d.Email = acct.Email
	return a.queueMailTo(ctx, acct.ID, acct.Email, kind, d)
}

// queueMailTo renders kind for the address to (an account's, or the operator's about account
// acctID), seals it and puts it in the outbox.
func (a *app) queueMailTo(ctx context.Context, acctID, to, kind string, d mailData) error {
	m := a.mail
	d.Site = a.siteName
	out, err := m.templates.render(kind, to, d)
	if err != nil {
		return err
	}
	plain, err := json.Marshal(out)
	if err != nil {
		return err
	}
	if _, err := m.store.EnqueueMail(context.WithoutCancel(ctx), ledger.MailMessage{
		AccountID: acctID, Kind: kind, Sealed: m.sealer.Seal(plain, mailAD(acctID, kind)),
	}); err != nil {
		return fmt.Errorf("queueing %s mail: %w", kind, err)
	}
	select {
	case m.wake <- struct{}{}:
	default:
	}
	return nil
}

// mailLink is an absolute link into the account area with a token.
func (a *app) mailLink(path, token string) string {
	return a.publicURL + a.prefix + path + "?token=" + token
}

// validFor says how long a link works, for the templates.
func validFor(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		n := int(d / (24 * time.Hour))
		return fmt.Sprintf("%d day%s", n, plural(n))
	}
	n := int(d / time.Hour)
	if n <= 1 {
		return "1 hour"
	}
	return fmt.Sprintf("%d hours", n)
}

// sendTokenMail makes a single-use token of purpose for the account and queues the kind of
// message that carries its link to path. It returns the link.
func (a *app) sendTokenMail(ctx context.Context, acct ledger.Account, purpose ledger.TokenPurpose, ttl time.Duration, kind, path string) (string, error) {
	tok, err := a.store.CreateToken(context.WithoutCancel(ctx), acct.ID, purpose, ttl)
	if err != nil {
		return "", err
	}
	link := a.mailLink(path, tok)
	if err := a.queueMail(ctx, acct, kind, mailData{Link: link, Valid: validFor(ttl)}); err != nil {
		return "", err
	}
	return link, nil
}

// provisionSMTP returns the smtp settings with defaults set and placeholders resolved, or nil
// without smtp.
func (h *Handler) provisionSMTP(repl *caddy.Replacer) (*SMTP, error) {
	if h.SMTP == nil {
		return nil, nil
	}
	s := *h.SMTP
	s.Security = cmp.Or(s.Security, "starttls")
	if s.Port == 0 {
		s.Port = map[string]int{"starttls": 587, "tls": 465, "none": 25}[s.Security]
	}
	s.Timeout = cmp.Or(s.Timeout, caddy.Duration(defaultMailTimeout))
	s.Username = strings.TrimSpace(repl.ReplaceAll(s.Username, ""))
	s.Password = repl.ReplaceAll(s.Password, "")
	if (s.Username == "") != (s.Password == "") {
		return nil, errors.New("textgen_account: smtp: username and password must both be set (after resolving placeholders) or both be empty")
	}
	if h.MailTemplates != "" {
		if _, err := loadMailTemplates(h.MailTemplates); err != nil {
			return nil, fmt.Errorf("textgen_account: %w", err)
		}
	}
	return &s, nil
}

// startMailer loads the mail key (mail_key, else the key file in Caddy's data directory) and
// the templates. It runs in the textgen app's Start, which `caddy validate` never calls.
func (h *Handler) startMailer(s SMTP) (*mailer, error) {
	key, err := sealing.Key{Setting: "mail_key", Value: h.MailKey, File: "retention.key",
		User: "smtp", Seals: "queued e-mail"}.Load(h.logger, textgenapp.LedgerShared(h.Ledger))
	if err != nil {
		return nil, err
	}
	return newMailer(s, key, h.MailTemplates)
}
