package pgledger

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestPostgresVerifyFindsDamage: figures changed behind the ledger's back, a hold resolved twice
// and an entry that does not add up are each reported.
func TestPostgresVerifyFindsDamage(t *testing.T) {
	s := openPostgres(t, pgtest.NewDatabase(t), pgQuiet)
	a := ledgertest.MustAccount(t, s, "damaged@example.com").ID
	ledgertest.MustGrant(t, s, a, ledger.Live, 3)
	ledgertest.MustHold(t, s, a, ledger.Live, "r1")
	if _, err := s.Settle(bg, a, "r1"); err != nil {
		t.Fatal(err)
	}
	ledgertest.VerifyClean(t, s)
	for _, q := range []string{
		// A second settle of r1, as a buggy resolver would write it.
		`INSERT INTO entries (account_id, seq, kind, mode, amount, balance_after, available_after, request_id, at)
			SELECT id, next_seq, 'settle', 'live', -1, balance - 1, balance - 1 - held, 'r1', 0 FROM accounts WHERE id = '` + a + `'`,
		`UPDATE accounts SET balance = balance + 7 WHERE id = '` + a + `'`,
		`UPDATE entries SET available_after = 99 WHERE account_id = '` + a + `' AND seq = 1`,
	} {
		if _, err := s.pool.Exec(bg, q); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := s.Verify(bg)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, p := range rep.Problems {
		kinds = append(kinds, p.Kind)
	}
	for _, want := range []string{"hold_resolved_twice", "balance_mismatch", "entry_mismatch", "seq_gap"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("verify did not report %s: %+v", want, rep.Problems)
		}
	}
	if rep.OK {
		t.Error("verify says OK")
	}
}

// TestPostgresBackupPointsToPostgresTools: Backup refuses, and says what to use instead.
func TestPostgresBackupPointsToPostgresTools(t *testing.T) {
	s := openPostgres(t, pgtest.NewDatabase(t), pgQuiet)
	var buf strings.Builder
	err := s.Backup(bg, &buf)
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "pg_dump") || buf.Len() != 0 {
		t.Fatalf("Backup: %v (%d bytes written)", err, buf.Len())
	}
}

// TestPostgresVerifyCodes: a code whose uses do not match its redemptions, and a redemption
// without its grant entry, are reported.
func TestPostgresVerifyCodes(t *testing.T) {
	s := openPostgres(t, pgtest.NewDatabase(t), pgQuiet)
	a := ledgertest.MustAccount(t, s, "code@example.com").ID
	code, c := ledgertest.MustCode(t, s, ledger.NewCode{Credits: 2, MaxUses: 3})
	if _, err := s.Redeem(bg, a, code); err != nil {
		t.Fatal(err)
	}
	ledgertest.VerifyClean(t, s)
	if _, err := s.pool.Exec(bg, `UPDATE redemption_codes SET uses = 0 WHERE id = $1`, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(bg, `UPDATE entries SET reference = 'other' WHERE account_id = $1`, a); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Verify(bg)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, p := range rep.Problems {
		kinds = append(kinds, p.Kind)
	}
	if rep.OK || !slices.Contains(kinds, "code_uses") || !slices.Contains(kinds, "code_redemption") {
		t.Fatalf("verify of a damaged code: %+v", rep)
	}
}

// TestPostgresVerifyLots: a lot whose held credits no open hold took, and an expire entry that
// took more than its grant gave, are reported.
func TestPostgresVerifyLots(t *testing.T) {
	s := openPostgres(t, pgtest.NewDatabase(t), pgQuiet)
	a := ledgertest.MustAccount(t, s, "lots@example.com").ID
	g, err := s.Grant(bg, ledger.GrantRequest{AccountID: a, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 4,
		Expires: s.now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	ledgertest.VerifyClean(t, s)
	if _, err := s.pool.Exec(bg, `UPDATE lots SET held = 2 WHERE account_id = $1`, a); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(bg, `INSERT INTO entries (account_id, seq, kind, mode, amount, balance_after, available_after, reason, at)
		VALUES ($1, 2, 'expire', 'live', -5, -1, -1, $2, 0)`, a, ledger.ExpireReason(g.Entry.Seq)); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Verify(bg)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, p := range rep.Problems {
		kinds = append(kinds, p.Kind)
	}
	if rep.OK || !slices.Contains(kinds, "lot_held_mismatch") || !slices.Contains(kinds, "expired_too_much") {
		t.Fatalf("verify of damaged lots: %+v", rep)
	}
}
