package pgledger

import (
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

// Two instances (two pools on one database) drain one outbox at once: every message is claimed
// by exactly one of them, so none is sent twice.
func TestPostgresInstancesShareOutbox(t *testing.T) {
	a, b := twoInstances(t, PostgresOptions{})
	const n = 100
	for i := range n {
		if _, err := a.EnqueueMail(bg, ledger.MailMessage{Kind: "test", Sealed: []byte{byte(i), 1}}); err != nil {
			t.Fatal(err)
		}
	}
	ledgertest.DrainOutbox(t, n, a, b, a, b, a, b, a, b)
}
