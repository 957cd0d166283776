package mailtest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/smtp"
	"os"
	"strconv"
	"testing"
	"time"
)

// The helper's own check: a message sent over SMTP is read back through the API, and survives
// a Stop and Start, during which the SMTP port refuses connections.
func TestReceiveStopStart(t *testing.T) {
	s := New(t)
	addr := s.Host() + ":" + strconv.Itoa(s.SMTPPort())
	send := func() error {
		return smtp.SendMail(addr, nil, "from@example.com", []string{"to@example.com"},
			[]byte("From: from@example.com\r\nTo: to@example.com\r\nSubject: hello mailtest\r\n\r\nbody text\r\n"))
	}
	if err := send(); err != nil {
		t.Fatal(err)
	}
	m := s.WaitFor(t, "to@example.com", "hello mailtest", 10*time.Second)
	if m.Text == "" || m.From.Address != "from@example.com" {
		t.Fatalf("message read back wrong: %+v", m)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := send(); err == nil {
		t.Fatal("sending to a stopped mailpit succeeded")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	ms, err := s.To(context.Background(), "to@example.com", "hello mailtest")
	if err != nil || len(ms) != 1 {
		t.Fatalf("after a restart: %d messages, %v; want the 1 received before", len(ms), err)
	}
}

// NewTLS: STARTTLS with the test's certificate and the one login work; a wrong password and a
// plain connection do not.
func TestTLSAndLogin(t *testing.T) {
	s := NewTLS(t, "sender", "right password")
	addr := s.Host() + ":" + strconv.Itoa(s.SMTPPort())
	send := func(password string, useTLS bool) error {
		c, err := smtp.Dial(addr)
		if err != nil {
			return err
		}
		defer c.Close()
		if useTLS {
			if err := c.StartTLS(&tls.Config{ServerName: "127.0.0.1", RootCAs: s.CertPool()}); err != nil {
				return err
			}
		}
		if err := c.Auth(smtp.PlainAuth("", "sender", password, "127.0.0.1")); err != nil {
			return err
		}
		if err := c.Mail("from@example.com"); err != nil {
			return err
		}
		if err := c.Rcpt("to@example.com"); err != nil {
			return err
		}
		w, err := c.Data()
		if err != nil {
			return err
		}
		w.Write([]byte("From: from@example.com\r\nTo: to@example.com\r\nSubject: over tls\r\n\r\nbody\r\n"))
		return w.Close()
	}
	if err := send("wrong password", true); err == nil {
		t.Fatal("a wrong password was accepted")
	}
	if err := send("right password", false); err == nil {
		t.Fatal("a login without STARTTLS was accepted")
	}
	if err := send("right password", true); err != nil {
		t.Fatal(err)
	}
	s.WaitFor(t, "to@example.com", "over tls", 10*time.Second)
}

// NewImplicitTLS: a client that starts in plain text gets no greeting, only the connection
// closed; one that starts with TLS (the test's certificate) gets the greeting, and the login
// and the message go through.
func TestImplicitTLS(t *testing.T) {
	s := NewImplicitTLS(t, "sender", "right password")
	addr := s.Host() + ":" + strconv.Itoa(s.SMTPPort())

	plain, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Write([]byte("EHLO plain.example\r\n")); err != nil {
		t.Fatal(err)
	}
	plain.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(plain)
	if bytes.Contains(got, []byte("220")) || bytes.Contains(got, []byte("250")) {
		t.Fatalf("a plain connection was answered in SMTP: %q", got)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("a plain connection was neither answered nor closed")
	}

	conn, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "127.0.0.1", RootCAs: s.CertPool()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := smtp.NewClient(conn, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Auth(smtp.PlainAuth("", "sender", "right password", "127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	if err := c.Mail("from@example.com"); err != nil {
		t.Fatal(err)
	}
	if err := c.Rcpt("to@example.com"); err != nil {
		t.Fatal(err)
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("From: from@example.com\r\nTo: to@example.com\r\nSubject: implicit tls\r\n\r\nbody\r\n"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s.WaitFor(t, "to@example.com", "implicit tls", 10*time.Second)
}
