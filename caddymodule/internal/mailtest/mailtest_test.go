package mailtest

import (
	"context"
	"net/smtp"
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
