package account

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// The low-balance check over more than one page of crossed alerts, on two instances that share
// one PostgreSQL ledger: every crossing is noted and mailed once, and a run ends even while the
// database refuses every note.

// withQueuedMail gives the app e-mail whose sender is stopped by the test before it sends
// anything: the messages stay in the outbox, where the test counts them.
func withQueuedMail(t *testing.T) envOpt {
	return func(c *appConfig) {
		m, err := newMailer(SMTP{Host: "127.0.0.1", Port: 1, Security: "none",
			From: "Test API <no-reply@example.com>", Timeout: caddy.Duration(time.Second)}, testMailKey, "")
		if err != nil {
			t.Fatal(err)
		}
		c.mail = m
	}
}

// checkLowBalancesWithin runs a's check and reports an error if it has not ended after d.
func checkLowBalancesWithin(a *app, d time.Duration) error {
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		a.checkLowBalances(ctx)
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(d):
		cancel()
		<-done
		return fmt.Errorf("the low-balance check did not end within %s", d)
	}
}

func TestLowBalanceCheckPagesOnPostgres(t *testing.T) {
	old := lowBalanceEvery
	lowBalanceEvery = time.Hour // the test runs the check itself
	t.Cleanup(func() { lowBalanceEvery = old })
	url := pgtest.NewDatabase(t)
	open := postgresOpener(t, url)
	var apps []*app
	for range 2 {
		e := newTestEnvOn(t, open(), withQueuedMail(t))
		t.Cleanup(e.app.close)
		e.app.stopMail()
		apps = append(apps, e.app)
	}
	store := apps[0].store
	db, err := pgx.Connect(bg, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(bg)
	sql := func(q string, args ...any) int64 {
		t.Helper()
		var n int64
		if err := db.QueryRow(bg, q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}

	// More crossed alerts than one page holds: accounts without credits and an alert of 1.
	n := lowBalancePage + 5
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				a, err := store.CreateAccount(bg, fmt.Sprintf("low%04d@example.com", i))
				if err == nil {
					_, err = store.SetLowBalanceAlert(bg, a.ID, 1)
				}
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		return
	}
	// One with credits above its alert and one disabled: neither is mailed.
	rich, err := store.CreateAccount(bg, "rich@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Grant(bg, ledger.GrantRequest{AccountID: rich.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 9}); err != nil {
		t.Fatal(err)
	}
	off, err := store.CreateAccount(bg, "off@example.com")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{rich.ID, off.ID} {
		if _, err := store.SetLowBalanceAlert(bg, id, 5); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.SetAccountStatus(bg, off.ID, ledger.StatusDisabled); err != nil {
		t.Fatal(err)
	}

	// The database refuses every note (a trigger counts the attempts, in a sequence that a
	// rollback does not undo): the check still ends, having tried no account twice.
	for _, q := range []string{
		`CREATE SEQUENCE note_attempts`,
		`CREATE FUNCTION refuse_note() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM nextval('note_attempts'); RAISE EXCEPTION 'notes refused by the test'; END $$`,
		`CREATE TRIGGER refuse_note BEFORE UPDATE OF low_balance_notified ON accounts
		FOR EACH ROW EXECUTE FUNCTION refuse_note()`,
	} {
		if _, err := db.Exec(bg, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := checkLowBalancesWithin(apps[0], time.Minute); err != nil {
		t.Fatal(err)
	}
	attempts := sql(`SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM note_attempts`)
	if attempts < int64(lowBalancePage) || attempts > int64(n) {
		t.Fatalf("%d notes tried with every note refused; want the first page's %d, and no account twice (%d accounts)",
			attempts, lowBalancePage, n)
	}
	if m := sql(`SELECT count(*) FROM mail_outbox`); m != 0 {
		t.Fatalf("%d messages queued while no note was taken", m)
	}

	// Notes taken again: both instances check at once; every crossing is noted and mailed once.
	if _, err := db.Exec(bg, `DROP TRIGGER refuse_note ON accounts`); err != nil {
		t.Fatal(err)
	}
	var both sync.WaitGroup
	for _, a := range apps {
		both.Go(func() {
			if err := checkLowBalancesWithin(a, time.Minute); err != nil {
				t.Error(err)
			}
		})
	}
	both.Wait()
	if t.Failed() {
		return
	}
	if left, err := store.LowBalanceChanges(bg, 0); err != nil || len(left) != 0 {
		t.Fatalf("crossed alerts left after the check: %d, %v", len(left), err)
	}
	if m := sql(`SELECT count(*) FROM mail_outbox WHERE kind = 'low_balance'`); m != int64(n) {
		t.Fatalf("%d low-balance messages queued for %d crossings", m, n)
	}
	if m := sql(`SELECT count(DISTINCT account_id) FROM mail_outbox WHERE account_id IN ($1, $2)`, rich.ID, off.ID); m != 0 {
		t.Fatal("a message for an account above its alert or disabled")
	}
	if got := sql(`SELECT count(*) FROM accounts WHERE low_balance_notified`); got != int64(n) {
		t.Fatalf("%d accounts noted, want %d", got, n)
	}
}
