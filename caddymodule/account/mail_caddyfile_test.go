package account

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestUnmarshalCaddyfileSMTP(t *testing.T) {
	d := caddyfile.NewTestDispenser(`textgen_account {
		ledger /var/lib/textgen
		public_url https://api.example.com
		smtp {
			host smtp.example.com
			port 2525
			security tls
			username {env.SMTP_USER}
			password {env.SMTP_PASSWORD}
			from "Example API <no-reply@example.com>"
			timeout 10s
		}
		mail_templates /etc/textgen/mail
		mail_key {env.TEXTGEN_MAIL_KEY}
	}`)
	var h Handler
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	want := Handler{Ledger: "/var/lib/textgen", PublicURL: "https://api.example.com",
		SMTP: &SMTP{Host: "smtp.example.com", Port: 2525, Security: "tls", Username: "{env.SMTP_USER}", Password: "{env.SMTP_PASSWORD}",
			From: "Example API <no-reply@example.com>", Timeout: caddy.Duration(10 * time.Second)},
		MailTemplates: "/etc/textgen/mail", MailKey: "{env.TEXTGEN_MAIL_KEY}"}
	got, _ := json.Marshal(h)
	exp, _ := json.Marshal(want)
	if !bytes.Equal(got, exp) {
		t.Fatalf("parsed\n%s\nwant\n%s", got, exp)
	}
	for _, bad := range []string{
		"textgen_account {\n smtp x\n}",
		"textgen_account {\n smtp {\n host a\n host b\n }\n}",
		"textgen_account {\n smtp {\n hots a\n }\n}",
		"textgen_account {\n smtp {\n port many\n }\n}",
		"textgen_account {\n smtp {\n host\n }\n}",
		"textgen_account {\n smtp {\n }\n smtp {\n }\n}",
	} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

func TestValidateSMTP(t *testing.T) {
	good := SMTP{Host: "smtp.example.com", From: "no-reply@example.com"}
	ok := Handler{Ledger: "/x", PublicURL: "https://api.example.com", SMTP: &good}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	with := func(f func(*SMTP)) *SMTP { s := good; f(&s); return &s }
	for field, h := range map[string]Handler{
		"public_url": {Ledger: "/x", SMTP: &good},
		"host":       {Ledger: "/x", PublicURL: "https://a.example", SMTP: with(func(s *SMTP) { s.Host = "" })},
		"port":       {Ledger: "/x", PublicURL: "https://a.example", SMTP: with(func(s *SMTP) { s.Port = 70000 })},
		"security":   {Ledger: "/x", PublicURL: "https://a.example", SMTP: with(func(s *SMTP) { s.Security = "ssl" })},
		"from":       {Ledger: "/x", PublicURL: "https://a.example", SMTP: with(func(s *SMTP) { s.From = "not an address" })},
		"timeout":    {Ledger: "/x", PublicURL: "https://a.example", SMTP: with(func(s *SMTP) { s.Timeout = -1 })},
		"password":   {Ledger: "/x", PublicURL: "https://a.example", SMTP: with(func(s *SMTP) { s.Username = "u" })},
		"username":   {Ledger: "/x", PublicURL: "https://a.example", SMTP: with(func(s *SMTP) { s.Username, s.Password, s.Security = "u", "p", "none" })},
	} {
		if err := h.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: Validate() = %v, want an error naming it", field, err)
		}
	}
}

// The operator's templates replace the built-in ones of the same name; a broken one is refused
// at start, naming the file.
func TestMailTemplatesOverride(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "reset.txt"), []byte("Subject: Neues Passwort für {{.Site}}\n\nHallo {{.Email}}, hier: {{.Link}}\n"), 0o644)
	mt, err := loadMailTemplates(dir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := mt.render("reset", "a@example.com", mailData{Site: "Beispiel", Email: "a@example.com", Link: "https://x/account/reset?token=t", Valid: "1 hour"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Subject != "Neues Passwort für Beispiel" || out.Text != "Hallo a@example.com, hier: https://x/account/reset?token=t\n" ||
		!strings.Contains(out.HTML, "Choose a new password") {
		t.Fatalf("rendered %+v", out)
	}
	// html/template escapes what it inserts.
	out, _ = mt.render("verify", "a@example.com", mailData{Site: "<b>Site</b>", Email: "a@example.com", Link: "https://x/?token=t", Valid: "2 days"})
	if strings.Contains(out.HTML, "<b>Site</b>") {
		t.Fatalf("HTML not escaped: %s", out.HTML)
	}
	os.WriteFile(filepath.Join(dir, "invite.html"), []byte("{{.Nope"), 0o644)
	if _, err := loadMailTemplates(dir); err == nil || !strings.Contains(err.Error(), "invite.html") {
		t.Fatalf("a broken template: %v", err)
	}
	os.Remove(filepath.Join(dir, "invite.html"))
	os.WriteFile(filepath.Join(dir, "verify.txt"), []byte("no subject line\n"), 0o644)
	if _, err := loadMailTemplates(dir); err == nil || !strings.Contains(err.Error(), "verify.txt") {
		t.Fatalf("a template without subject: %v", err)
	}
}
