//go:build linux

package operator

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
	"github.com/caddy-textgen/textgen/ledger/disktest"
)

// TestCreditOutcomeUnknown: on a real Badger ledger whose disk another program filled just
// after a grant passed its space check, the grant waits in the ledger for space; when the
// operator's request ends first, the answer says that the outcome is unknown and that a retry
// with the same reference is safe (it is: once space is back the grant is made, and the retry
// credits nothing more), never that the grant failed.
func TestCreditOutcomeUnknown(t *testing.T) {
	disktest.Run(t, 40<<20, func(t *testing.T, dir string) {
		open := func() *badgerledger.Badger {
			// Checked an hour apart, the space is seen full by the grant's commit only.
			s, err := badgerledger.Open(filepath.Join(dir, "ledger"), badgerledger.Options{SweepInterval: -1, GCInterval: -1,
				LastUsedFlushInterval: -1, SpaceCheckInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		store := open()
		defer func() { store.Close() }()
		acct, err := store.CreateAccount(context.Background(), "ops@example.com")
		if err != nil {
			t.Fatal(err)
		}
		remove := disktest.Fill(t, dir)
		removed := false
		defer func() {
			if !removed {
				remove()
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, _, err = Credit(ctx, store, acct.ID, ledger.KindGrant, "live", 10, "ticket-7", "", time.Time{})
		var ae caddy.APIError
		if !errors.As(err, &ae) || ae.HTTPStatus != http.StatusServiceUnavailable ||
			ae.Error() != "the outcome is unknown: the grant may have been applied; retrying with the same --reference is safe (it is applied once)" {
			t.Fatalf("a grant whose commit waits for space: %#v", err)
		}
		remove()
		removed = true
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			b, err := store.Balance(context.Background(), acct.ID)
			if err != nil {
				t.Fatal(err)
			}
			if b.Balance == 10 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the queued grant was not made once space was back: %+v", b)
			}
		}
		// Restarted (its space checked again at open), the ledger has the grant once; the
		// retry with the same reference credits nothing more.
		if err := store.Close(); err != nil {
			t.Fatal(err)
		}
		store = open()
		_, res, err := Credit(context.Background(), store, acct.ID, ledger.KindGrant, "live", 10, "ticket-7", "", time.Time{})
		if err != nil || !res.Repeated || res.Balance.Balance != 10 {
			t.Fatalf("the retry with the same reference: %+v %v", res, err)
		}
		// Without a reference the message says a retry may credit twice.
		if m := outcomeUnknownMessage(ledger.KindAdjustment, false); !strings.Contains(m, "may apply it twice") || !strings.HasPrefix(m, outcomeUnknownPrefix) {
			t.Fatalf("the message without a reference: %s", m)
		}
	})
}

// TestCLIOutcomeUnknown: the CLI's grant exits 3 (errOutcomeUnknown) and says that retrying
// with the same --reference is safe when the admin API answers that the outcome is unknown, and
// when the request was sent and the connection then dropped without an answer (a fault server:
// a real Caddy cannot be made to drop it on demand); a server it cannot reach is a plain
// failure, and so is a read that got no answer.
func TestCLIOutcomeUnknown(t *testing.T) {
	cli := func(url string) *cliContext {
		addr := strings.TrimPrefix(url, "http://")
		return &cliContext{out: io.Discard, client: &adminClient{addr: addr, origin: "http://" + addr, setOrigin: true, http: &http.Client{}}}
	}
	answers := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":"`+outcomeUnknownMessage(ledger.KindGrant, true)+`"}`)
	}))
	defer answers.Close()
	drops := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer drops.Close()
	req := grantRequest{Credits: 10, Mode: "live", Reference: "ticket-7"}
	for name, url := range map[string]string{"the answer": answers.URL, "no answer": drops.URL} {
		err := cli(url).credit("acct_x", "credits", req)
		if !errors.Is(err, errOutcomeUnknown) || !strings.Contains(err.Error(), "the outcome is unknown: the grant may have been applied; retrying with the same --reference is safe") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := cli(drops.URL).credit("acct_x", "adjust", grantRequest{Credits: -1, Reason: "x"}); !errors.Is(err, errOutcomeUnknown) ||
		!strings.Contains(err.Error(), "adjustment may have been applied") || !strings.Contains(err.Error(), "may apply it twice") {
		t.Errorf("an adjustment without a reference and no answer: %v", err)
	}
	if _, err := cli(drops.URL).call(http.MethodGet, "/textgen/accounts/acct_x/balance", nil, nil, nil); err == nil || errors.Is(err, errOutcomeUnknown) {
		t.Errorf("a read without an answer: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := "http://" + l.Addr().String()
	l.Close()
	if err := cli(free).credit("acct_x", "credits", req); err == nil || errors.Is(err, errOutcomeUnknown) || !strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("a server it cannot reach: %v", err)
	}
}
