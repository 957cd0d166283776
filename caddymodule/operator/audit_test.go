package operator

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
)

// auditOf is the ledger's audit log, oldest first, one "who action account detail" a line.
func auditOf(t *testing.T, store ledger.Operators) []string {
	t.Helper()
	recs, _, err := store.ListAudit(context.Background(), ledger.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, strings.TrimSpace(r.OperatorID+" "+r.Action+" "+r.AccountID+" "+r.Detail))
	}
	slices.Reverse(out)
	return out
}

// wantAudit fails unless every line of want is in the audit log.
func wantAudit(t *testing.T, store ledger.Operators, want ...string) {
	t.Helper()
	got := auditOf(t, store)
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Fatalf("the audit log lacks %q:\n%s", w, strings.Join(got, "\n"))
		}
	}
}
