package ledgertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// The Mail role: the outbox, single-use tokens, the account's address state and low-balance
// alert. Run for every engine by the conformance suite.

func testOutbox(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	eng.setNow(t, &clock)
	var ids []string
	for i := range 3 {
		clock = clock.Add(time.Millisecond)
		id, err := s.EnqueueMail(bg, ledger.MailMessage{AccountID: "", Kind: "test", Sealed: []byte(fmt.Sprintf("sealed %d", i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := s.EnqueueMail(bg, ledger.MailMessage{Kind: "test"}); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("empty mail: %v", err)
	}
	if _, err := s.ClaimMail(bg, 0, 1); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("claim without lease: %v", err)
	}
	first, err := s.ClaimMail(bg, time.Minute, 2)
	if err != nil || len(first) != 2 || first[0].ID != ids[0] || first[1].ID != ids[1] {
		t.Fatalf("first claim: %+v, %v; want the two oldest", first, err)
	}
	if first[0].Attempts != 1 || first[0].Claim == "" || string(first[0].Sealed) != "sealed 0" || first[0].Kind != "test" {
		t.Fatalf("claimed message %+v", first[0])
	}
	second, err := s.ClaimMail(bg, time.Minute, 10)
	if err != nil || len(second) != 1 || second[0].ID != ids[2] {
		t.Fatalf("second claim: %+v, %v; want only the one not leased", second, err)
	}
	if more, err := s.ClaimMail(bg, time.Minute, 10); err != nil || len(more) != 0 {
		t.Fatalf("everything is leased, yet claimed %d, %v", len(more), err)
	}
	// Sent: gone. A wrong claim or a second mark changes nothing.
	if err := s.MarkMailSent(bg, first[0].ID, "wrong"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("mark with a wrong claim: %v", err)
	}
	if err := s.MarkMailSent(bg, first[0].ID, first[0].Claim); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkMailSent(bg, first[0].ID, first[0].Claim); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("second mark: %v", err)
	}
	// Failed: due again at the time given, not before.
	if err := s.RetryMail(bg, first[1].ID, first[1].Claim, clock.Add(10*time.Minute), "smtp: connection refused"); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * time.Minute) // the third's lease has run out; the second is not due
	got, err := s.ClaimMail(bg, time.Minute, 10)
	if err != nil || len(got) != 1 || got[0].ID != ids[2] || got[0].Attempts != 2 || got[0].Claim == second[0].Claim {
		t.Fatalf("claim after the lease ran out: %+v, %v", got, err)
	}
	// The instance whose lease ran out cannot mark it: the new holder sends it, once.
	if err := s.MarkMailSent(bg, ids[2], second[0].Claim); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("mark under an expired claim: %v", err)
	}
	if err := s.MarkMailSent(bg, ids[2], got[0].Claim); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(10 * time.Minute)
	got, err = s.ClaimMail(bg, time.Minute, 10)
	if err != nil || len(got) != 1 || got[0].ID != ids[1] || got[0].Attempts != 2 || got[0].LastError != "smtp: connection refused" {
		t.Fatalf("claim of the retried message: %+v, %v", got, err)
	}
}

// MustListMail lists the outbox or fails the test.
func MustListMail(t *testing.T, s ledger.Mail, limit int) []ledger.MailMessage {
	t.Helper()
	ms, err := s.ListMail(bg, limit)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Sealed != nil || m.Claim != "" {
			t.Fatalf("ListMail returned the sealed bytes (%q) or the claim (%q) of %s", m.Sealed, m.Claim, m.ID)
		}
	}
	return ms
}

// mailIDs are the ids of ms, in order.
func mailIDs(ms []ledger.MailMessage) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// testListMail: the operator's view of the outbox lists every queued message oldest first (not
// in the order they fall due), at most limit of them, never with its sealed bytes or claim, and
// shows a lease while it runs and the attempts, last error and next attempt after a retry.
func testListMail(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	eng.setNow(t, &clock)
	if ms := MustListMail(t, s, 0); len(ms) != 0 {
		t.Fatalf("a new store lists %+v", ms)
	}
	if _, err := s.ListMail(bg, -1); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("negative limit: %v", err)
	}
	start := clock
	var ids []string
	for i := range 3 {
		clock = clock.Add(time.Millisecond)
		m := ledger.MailMessage{AccountID: "acct_listlistlistlist", Kind: "invite", Sealed: []byte(fmt.Sprintf("sealed link %d", i))}
		if i == 0 {
			m.NextAttempt = start.Add(time.Hour) // the oldest falls due last
		}
		id, err := s.EnqueueMail(bg, m)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	all := MustListMail(t, s, 0)
	if got := mailIDs(all); !slices.Equal(got, ids) {
		t.Fatalf("listed %v; want oldest first %v", got, ids)
	}
	for i, m := range all {
		created := start.Add(time.Duration(i+1) * time.Millisecond)
		if m.AccountID != "acct_listlistlistlist" || m.Kind != "invite" || !m.Created.Equal(created) || m.Attempts != 0 ||
			m.LastError != "" || !m.LeaseUntil.IsZero() {
			t.Fatalf("listed message %d: %+v", i, m)
		}
	}
	if !all[0].NextAttempt.Equal(start.Add(time.Hour)) || !all[1].NextAttempt.Equal(all[1].Created) {
		t.Fatalf("next attempts: %v, %v", all[0].NextAttempt, all[1].NextAttempt)
	}
	if got := mailIDs(MustListMail(t, s, 2)); !slices.Equal(got, ids[:2]) {
		t.Fatalf("limit 2: %v; want %v", got, ids[:2])
	}
	if got := MustListMail(t, s, 5000); len(got) != 3 {
		t.Fatalf("limit over the maximum: %d messages", len(got))
	}

	// Claimed: the lease shows, the claim and the sealed bytes do not.
	claimed, err := s.ClaimMail(bg, time.Minute, 10)
	if err != nil || len(claimed) != 2 || claimed[0].ID != ids[1] {
		t.Fatalf("claim: %+v, %v", claimed, err)
	}
	m := MustListMail(t, s, 0)[1]
	if m.ID != ids[1] || m.Attempts != 1 || !m.LeaseUntil.Equal(clock.Add(time.Minute)) {
		t.Fatalf("a leased message is listed as %+v", m)
	}

	// Retried: the attempt, its error and the next attempt show; the lease is over.
	if err := s.RetryMail(bg, ids[1], claimed[0].Claim, clock.Add(10*time.Minute), "dial tcp 127.0.0.1:1: connect: connection refused"); err != nil {
		t.Fatal(err)
	}
	m = MustListMail(t, s, 0)[1]
	if m.Attempts != 1 || m.LastError != "dial tcp 127.0.0.1:1: connect: connection refused" ||
		!m.NextAttempt.Equal(clock.Add(10*time.Minute)) || !m.LeaseUntil.IsZero() {
		t.Fatalf("a retried message is listed as %+v", m)
	}

	// Listing changes nothing: the message not leased is still claimable, once.
	clock = clock.Add(2 * time.Minute)
	if got, err := s.ClaimMail(bg, time.Minute, 10); err != nil || len(got) != 1 || got[0].ID != ids[2] || got[0].Attempts != 2 {
		t.Fatalf("claim after listing: %+v, %v", got, err)
	}

	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := s.ListMail(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("ListMail with a canceled context: %v", err)
	}
}

// testDropMail: the operator gives up on a message. It is gone from the list and is never
// claimed; dropping it again, or an id never queued, is ErrNotFound. A message dropped while a
// sender holds it stays gone: the sender's MarkMailSent or RetryMail is ErrNotFound and queues
// nothing again.
func testDropMail(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	eng.setNow(t, &clock)
	var ids []string
	for i := range 4 {
		clock = clock.Add(time.Millisecond)
		id, err := s.EnqueueMail(bg, ledger.MailMessage{Kind: "verify", Sealed: []byte{byte(i), 1}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range []string{"mail_0000000000000000nothere", "", strings.Repeat("m", 100)} {
		if err := s.DropMail(bg, id); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("dropping %q, never queued: %v", id, err)
		}
	}
	if err := s.DropMail(bg, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.DropMail(bg, ids[0]); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("second drop: %v", err)
	}
	if got := mailIDs(MustListMail(t, s, 0)); !slices.Equal(got, ids[1:]) {
		t.Fatalf("listed after the drop: %v; want %v", got, ids[1:])
	}
	claimed, err := s.ClaimMail(bg, time.Minute, 10)
	if err != nil || !slices.Equal(mailIDs(claimed), ids[1:]) {
		t.Fatalf("claimed after the drop: %v, %v; want %v", mailIDs(claimed), err, ids[1:])
	}

	// Dropped while leased: the sender cannot mark it sent nor queue it again.
	if err := s.DropMail(bg, ids[1]); err != nil {
		t.Fatalf("dropping a leased message: %v", err)
	}
	if err := s.MarkMailSent(bg, ids[1], claimed[0].Claim); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("MarkMailSent of a dropped message: %v", err)
	}
	if err := s.DropMail(bg, ids[2]); err != nil {
		t.Fatal(err)
	}
	if err := s.RetryMail(bg, ids[2], claimed[1].Claim, clock, "smtp: 550 no such user"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("RetryMail of a dropped message: %v", err)
	}
	// The one left is still the sender's to mark.
	if err := s.MarkMailSent(bg, ids[3], claimed[2].Claim); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Hour) // every lease has run out
	if got := MustListMail(t, s, 0); len(got) != 0 {
		t.Fatalf("listed after dropping and sending everything: %+v", got)
	}
	if got, err := s.ClaimMail(bg, time.Minute, 10); err != nil || len(got) != 0 {
		t.Fatalf("claimed after dropping and sending everything: %+v, %v", got, err)
	}
}

// testOutboxConcurrentClaims: senders claiming at once never get one message twice, and
// together get every message.
func testOutboxConcurrentClaims(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	const n = 60
	for i := range n {
		if _, err := s.EnqueueMail(bg, ledger.MailMessage{Kind: "test", Sealed: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	DrainOutbox(t, n, s, s, s, s, s, s, s, s)
}

// DrainOutbox has one sender per store claim and mark messages at once until none is left, and
// checks that together they claimed n messages, each once.
func DrainOutbox(t *testing.T, n int, stores ...ledger.Mail) {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Go(func() {
			for {
				ms, err := s.ClaimMail(bg, time.Hour, 3)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ms) == 0 {
					return
				}
				for _, m := range ms {
					mu.Lock()
					seen[m.ID]++
					mu.Unlock()
					if err := s.MarkMailSent(bg, m.ID, m.Claim); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("claimed %d distinct messages of %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("message %s claimed %d times", id, c)
		}
	}
}

func testTokens(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	eng.setNow(t, &clock)
	a := MustAccount(t, s, "tok@example.com")
	if _, err := s.CreateToken(bg, a.ID, "other", time.Hour); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("unknown purpose: %v", err)
	}
	if _, err := s.CreateToken(bg, a.ID, ledger.TokenReset, 0); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("no ttl: %v", err)
	}
	if _, err := s.CreateToken(bg, "acct_nobodynobodynobo", ledger.TokenReset, time.Hour); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("unknown account: %v", err)
	}
	tok, err := s.CreateToken(bg, a.ID, ledger.TokenReset, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range eng.stored(t, s) {
		if bytes.Contains(d, []byte(tok)) {
			t.Fatal("the token itself is stored")
		}
	}
	if got, err := s.PeekToken(bg, ledger.TokenReset, tok); err != nil || got.ID != a.ID {
		t.Fatalf("peek: %+v, %v", got, err)
	}
	if _, err := s.PeekToken(bg, ledger.TokenVerify, tok); !errors.Is(err, ledger.ErrInvalidToken) {
		t.Fatalf("token of another purpose: %v", err)
	}
	if _, err := s.ConsumeToken(bg, ledger.TokenInvite, tok); !errors.Is(err, ledger.ErrInvalidToken) {
		t.Fatalf("consumed for another purpose: %v", err)
	}
	guessed := tok[:len(tok)-1] + string("ab"[0]+(tok[len(tok)-1]&1))
	for _, bad := range []string{"", "short", guessed, tok + "x"} {
		if _, err := s.ConsumeToken(bg, ledger.TokenReset, bad); !errors.Is(err, ledger.ErrInvalidToken) {
			t.Fatalf("token %q: %v", bad, err)
		}
	}
	if got, err := s.ConsumeToken(bg, ledger.TokenReset, tok); err != nil || got.ID != a.ID {
		t.Fatalf("consume: %+v, %v", got, err)
	}
	if _, err := s.ConsumeToken(bg, ledger.TokenReset, tok); !errors.Is(err, ledger.ErrInvalidToken) {
		t.Fatalf("second use: %v", err)
	}
	if _, err := s.PeekToken(bg, ledger.TokenReset, tok); !errors.Is(err, ledger.ErrInvalidToken) {
		t.Fatalf("peek after use: %v", err)
	}
	// Expiry by the ledger clock.
	old, err := s.CreateToken(bg, a.ID, ledger.TokenVerify, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Hour)
	if _, err := s.ConsumeToken(bg, ledger.TokenVerify, old); !errors.Is(err, ledger.ErrInvalidToken) {
		t.Fatalf("expired token: %v", err)
	}
	// Deleting the account's reset tokens ends every reset link, and no other kind.
	r1, err := s.CreateToken(bg, a.ID, ledger.TokenReset, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := s.CreateToken(bg, a.ID, ledger.TokenReset, time.Hour)
	v1, _ := s.CreateToken(bg, a.ID, ledger.TokenVerify, time.Hour)
	b := MustAccount(t, s, "tok-other@example.com")
	o1, _ := s.CreateToken(bg, b.ID, ledger.TokenReset, time.Hour)
	if err := s.DeleteTokens(bg, a.ID, ledger.TokenReset); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{r1, r2} {
		if _, err := s.PeekToken(bg, ledger.TokenReset, tok); !errors.Is(err, ledger.ErrInvalidToken) {
			t.Fatalf("a deleted reset token: %v", err)
		}
	}
	if _, err := s.PeekToken(bg, ledger.TokenVerify, v1); err != nil {
		t.Fatalf("a verify token went with the reset tokens: %v", err)
	}
	if _, err := s.PeekToken(bg, ledger.TokenReset, o1); err != nil {
		t.Fatalf("another account's token went too: %v", err)
	}
	if err := s.DeleteTokens(bg, a.ID, ledger.TokenInvite); err != nil {
		t.Fatalf("deleting none: %v", err)
	}
	// Racing consumers: exactly one wins.
	tok, err = s.CreateToken(bg, a.ID, ledger.TokenInvite, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			_, err := s.ConsumeToken(bg, ledger.TokenInvite, tok)
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, ledger.ErrInvalidToken):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d consumers of one token succeeded; want 1", wins.Load())
	}
}

func testAccountMailState(t *testing.T, eng engine) {
	s := eng.open(t, 0)
	signed, err := s.CreateAccountWithPassword(bg, "new@example.com", GoodPassword)
	if err != nil {
		t.Fatal(err)
	}
	made := MustAccount(t, s, "made@example.com")
	if !signed.Unverified || made.Unverified {
		t.Fatalf("sign-up unverified %v, operator-made unverified %v; want true, false", signed.Unverified, made.Unverified)
	}
	if got, _ := s.GetAccount(bg, signed.ID); !got.Unverified {
		t.Fatal("the sign-up's unverified flag was not stored")
	}
	if got, err := s.SetEmailVerified(bg, signed.ID); err != nil || got.Unverified {
		t.Fatalf("SetEmailVerified: %+v, %v", got, err)
	}
	if got, _ := s.Authenticate(bg, "new@example.com", GoodPassword); got.Unverified {
		t.Fatal("Authenticate returns a stale flag")
	}
	if _, err := s.SetEmailVerified(bg, "acct_nobodynobodynobo"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("unknown account: %v", err)
	}
	if _, err := s.SetLowBalanceAlert(bg, made.ID, -1); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("negative threshold: %v", err)
	}
	if got, err := s.SetLowBalanceAlert(bg, made.ID, 5); err != nil || got.LowBalanceAlert != 5 || got.LowBalanceNotified {
		t.Fatalf("SetLowBalanceAlert: %+v, %v", got, err)
	}
	// One crossing, many callers at once: one sees the change.
	var changed atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			c, err := s.NoteLowBalance(bg, made.ID, true)
			if err != nil {
				t.Error(err)
			}
			if c {
				changed.Add(1)
			}
		})
	}
	wg.Wait()
	if changed.Load() != 1 {
		t.Fatalf("%d callers saw the crossing; want 1", changed.Load())
	}
	if got, _ := s.GetAccount(bg, made.ID); !got.LowBalanceNotified || got.LowBalanceAlert != 5 {
		t.Fatalf("after the crossing: %+v", got)
	}
	if c, err := s.NoteLowBalance(bg, made.ID, false); err != nil || !c {
		t.Fatalf("back above: %v, %v", c, err)
	}
	if c, err := s.NoteLowBalance(bg, made.ID, false); err != nil || c {
		t.Fatalf("still above: %v, %v", c, err)
	}
	if _, err := s.NoteLowBalance(bg, "acct_nobodynobodynobo", true); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("unknown account: %v", err)
	}
	// Changing the threshold starts afresh.
	if _, err := s.NoteLowBalance(bg, made.ID, true); err != nil {
		t.Fatal(err)
	}
	if got, err := s.SetLowBalanceAlert(bg, made.ID, 3); err != nil || got.LowBalanceNotified {
		t.Fatalf("new threshold keeps the old notice: %+v, %v", got, err)
	}
}
