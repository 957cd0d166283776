package ledger

import (
	"sync"
	"testing"
	"time"
)

// Two instances (two pools on one database) drain one outbox at once: every message is claimed
// by exactly one of them, so none is sent twice.
func TestPostgresInstancesShareOutbox(t *testing.T) {
	a, b := twoInstances(t, PostgresOptions{})
	const n = 100
	for i := range n {
		if _, err := a.EnqueueMail(bg, MailMessage{Kind: "test", Sealed: []byte{byte(i), 1}}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	claimedBy := map[string]int{}
	var wg sync.WaitGroup
	for w := range 8 {
		s := []*Postgres{a, b}[w%2]
		wg.Go(func() {
			for {
				ms, err := s.ClaimMail(bg, time.Hour, 4)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ms) == 0 {
					return
				}
				for _, m := range ms {
					mu.Lock()
					claimedBy[m.ID]++
					mu.Unlock()
					if err := s.MarkMailSent(bg, m.ID, m.Claim); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if len(claimedBy) != n {
		t.Fatalf("%d of %d messages claimed", len(claimedBy), n)
	}
	for id, c := range claimedBy {
		if c != 1 {
			t.Fatalf("message %s claimed %d times", id, c)
		}
	}
}
