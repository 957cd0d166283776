package ledger

import "testing"

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
	DrainOutbox(t, n, a, b, a, b, a, b, a, b)
}
