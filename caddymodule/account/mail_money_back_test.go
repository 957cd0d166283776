package account

import (
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/mailtest"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// withOperatorEmail sets operator_email and public_url.
func withOperatorEmail(addr string) envOpt {
	return func(c *appConfig) {
		c.operatorEmail = addr
		c.publicURL = "https://api.example.com"
	}
}

// TestRefundAndDisputeMail: through the sealed outbox to a real SMTP server (mailpit) from a
// Badger ledger on disk, with Stripe's signed events: a refund sends the customer one e-mail
// (amount, of what, partial or full, the refund's id, the credits, the receipt's link), however
// often and to however many instances the event is delivered (here two account areas on one
// ledger, Badger on disk or PostgreSQL, five deliveries at once, and the refund's later
// refund.updated); a new dispute sends
// the operator one e-mail with its id, reason, amount and account, and its close sends none; a
// refund that failed sends none.
func TestRefundAndDisputeMail(t *testing.T) {
	fastMail(t)
	t.Run("badger", func(t *testing.T) {
		store := diskLedger(t, t.TempDir())
		t.Cleanup(func() { store.Close() })
		refundAndDisputeMail(t, store, store)
	})
	t.Run("postgres", func(t *testing.T) {
		// Two instances, each with its own connection pool, on one PostgreSQL ledger.
		open := postgresOpener(t, pgtest.NewDatabase(t))
		refundAndDisputeMail(t, open(), open())
	})
}

// refundAndDisputeMail runs the test on two account areas, one on each store.
func refundAndDisputeMail(t *testing.T, stores ...ledger.Store) {
	mp := mailtest.New(t)
	store := stores[0]
	envs := make([]*testEnv, 2)
	for i := range envs {
		envs[i] = newTestEnvOn(t, stores[i], withMail(t, mp), withStripe("http://127.0.0.1:1", testWebhookSecret), withOperatorEmail("ops@example.com"))
		t.Cleanup(envs[i].app.close)
	}
	e := envs[0]
	email := uniqueEmail("refunded")
	acct, err := store.CreateAccount(bg, email)
	if err != nil {
		t.Fatal(err)
	}
	buyThrough(t, e, acct.ID, "cs_test_mail_1")
	buyThrough(t, e, acct.ID, "cs_test_mail_2")
	pi1, pi2 := paymentIntentOf("cs_test_mail_1"), paymentIntentOf("cs_test_mail_2")

	payload := refundEvent("refund.created", "re_test_mail_1", pi1, 50, "pending")
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			deliver(t, envs[i%2].srv.URL+"/account/stripe/webhook", payload, testWebhookSecret, time.Now())
		})
	}
	wg.Wait()
	hook(t, envs[1], refundEvent("refund.updated", "re_test_mail_1", pi1, 50, "succeeded"), 200, "duplicate")
	m := mp.WaitFor(t, email, "Your refund of €0.50 from Test API", 30*time.Second)
	for _, body := range []string{m.Text, m.HTML} {
		mustContain(t, "refund e-mail", body, "€0.50", "€2.00", "cs_test_mail_1", "re_test_mail_1", "Credits taken back: 3",
			"https://api.example.com/account/receipts/cs_test_mail_1")
		mustNotContain(t, "partial refund e-mail", body, "all of it")
	}
	hook(t, e, refundEvent("refund.created", "re_test_mail_2", pi1, 150, "succeeded"), 200, "refund applied")
	m = mp.WaitFor(t, email, "Your refund of €1.50 from Test API", 30*time.Second)
	mustContain(t, "the refund of the rest", m.Text, "re_test_mail_2", "all of it")

	hook(t, e, disputeEvent("charge.dispute.created", "du_test_mail_1", pi2, 200, "needs_response"), 200, "dispute open")
	hook(t, envs[1], disputeEvent("charge.dispute.created", "du_test_mail_1", pi2, 200, "needs_response"), 200, "duplicate")
	m = mp.WaitFor(t, "ops@example.com", "New dispute du_test_mail_1 on Test API: €2.00, fraudulent", 30*time.Second)
	for _, body := range []string{m.Text, m.HTML} {
		mustContain(t, "dispute e-mail", body, "du_test_mail_1", "fraudulent", "€2.00", acct.ID, email, "cs_test_mail_2", pi2,
			"caddy textgen account get --account "+acct.ID)
	}
	hook(t, e, disputeEvent("charge.dispute.closed", "du_test_mail_1", pi2, 200, "lost"), 200, "dispute lost")
	hook(t, e, refundEvent("refund.failed", "re_test_mail_2", pi1, 150, "failed"), 200, "refund failed")

	// Every webhook above queued its e-mails before it answered: once the outbox is empty,
	// whatever the senders had to send is out.
	waitOutboxEmpty(t, stores...)
	if n := countMail(t, mp, email, "Your refund of €0.50"); n != 1 {
		t.Fatalf("%d e-mails of the first refund, want 1", n)
	}
	all, err := mp.Messages(bg)
	if err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, m := range all {
		subjects = append(subjects, m.Subject)
	}
	if len(all) != 3 {
		t.Fatalf("%d e-mails, want the two refunds' and the dispute's: %q", len(all), subjects)
	}
	if n := countMail(t, mp, "ops@example.com", "New dispute du_test_mail_1"); n != 1 {
		t.Fatalf("%d e-mails of the dispute, want 1: %q", n, subjects)
	}
}
