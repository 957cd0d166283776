package receipts

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/caddymodule/internal/sealing"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
	"github.com/caddy-textgen/textgen/ledger/pgledger"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

var bg = context.Background()

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func testSealer(t *testing.T, b byte) *sealing.Sealer {
	t.Helper()
	s, err := sealing.New(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sampleReceipt() Generation {
	return Generation{Type: "generation", RequestID: "req_0123456789ABCDEFGHIJKL", AccountID: "acct_x", KeyID: "key_y",
		Tool: "summarizer", Mode: "live", Credits: 1, Time: Time(time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)),
		TextSHA256: strings.Repeat("ab", 32)}
}

// TestSignVerifyTamperRotate: on a real Badger directory, a receipt verifies with the listed
// public key alone; any changed field, a changed signature or an unlisted key id is refused;
// after a rotation the old receipt still verifies with the old key, still listed, and new ones
// are signed with the new key; the private key is nowhere in the directory in clear.
func TestSignVerifyTamperRotate(t *testing.T) {
	dir := t.TempDir()
	store, err := badgerledger.Open(dir, badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sg := New(store, testSealer(t, 7))
	set, err := sg.PublicKeys(bg)
	if err != nil || len(set.Keys) != 1 || !set.Keys[0].Current || set.Keys[0].ValidUntil != "" {
		t.Fatalf("the first key list: %+v %v", set, err)
	}
	old, err := sg.Sign(bg, sampleReceipt())
	if err != nil {
		t.Fatal(err)
	}
	if old.KeyID != set.Keys[0].KeyID {
		t.Fatalf("signed with %s, the list has %s", old.KeyID, set.Keys[0].KeyID)
	}
	if err := Verify(set, old); err != nil {
		t.Fatalf("a fresh receipt: %v", err)
	}
	// The canonical form is what was signed: keys sorted, no spaces.
	if !bytes.HasPrefix(old.Receipt, []byte(`{"account_id":"acct_x","credits":1,"key_id":"key_y","mode":"live","request_id":`)) {
		t.Fatalf("not canonical: %s", old.Receipt)
	}
	// A receipt re-indented by some tool still verifies (Verify canonicalizes).
	var pretty bytes.Buffer
	_ = json.Indent(&pretty, old.Receipt, "", "  ")
	if err := Verify(set, Signed{Receipt: pretty.Bytes(), Signature: old.Signature, KeyID: old.KeyID}); err != nil {
		t.Fatalf("an indented receipt: %v", err)
	}
	// Tampering with any field, or the signature, or the key id.
	for _, f := range []func(*Generation){
		func(g *Generation) { g.Credits = 2 },
		func(g *Generation) { g.TextSHA256 = strings.Repeat("cd", 32) },
		func(g *Generation) { g.RequestID = "req_other" },
		func(g *Generation) { g.AccountID = "acct_other" },
		func(g *Generation) { g.KeyID = "key_other" },
		func(g *Generation) { g.Tool = "translator" },
		func(g *Generation) { g.Time = Time(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)) },
		func(g *Generation) { g.Mode = "test" },
	} {
		g := sampleReceipt()
		f(&g)
		c, _ := Canonical(g)
		if err := Verify(set, Signed{Receipt: c, Signature: old.Signature, KeyID: old.KeyID}); !errors.Is(err, ErrInvalid) {
			t.Errorf("a tampered receipt %s: %v", c, err)
		}
	}
	sig := []byte(old.Signature)
	sig[3] ^= 1
	if err := Verify(set, Signed{Receipt: old.Receipt, Signature: string(sig), KeyID: old.KeyID}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a changed signature: %v", err)
	}
	if err := Verify(set, Signed{Receipt: old.Receipt, Signature: old.Signature, KeyID: "rk_unknown"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("an unlisted key: %v", err)
	}

	cur, err := sg.Rotate(bg)
	if err != nil || cur.KeyID == old.KeyID || !cur.Current {
		t.Fatalf("rotation: %+v %v", cur, err)
	}
	set2, err := sg.PublicKeys(bg)
	if err != nil || len(set2.Keys) != 2 || set2.Keys[0].KeyID != old.KeyID || set2.Keys[0].Current || set2.Keys[0].ValidUntil == "" ||
		set2.Keys[1].KeyID != cur.KeyID || !set2.Keys[1].Current {
		t.Fatalf("the list after the rotation: %+v %v", set2, err)
	}
	if err := Verify(set2, old); err != nil {
		t.Fatalf("the old receipt after the rotation: %v", err)
	}
	fresh, err := sg.Sign(bg, sampleReceipt())
	if err != nil || fresh.KeyID != cur.KeyID {
		t.Fatalf("signed after the rotation with %s (%v), want %s", fresh.KeyID, err, cur.KeyID)
	}
	if err := Verify(set2, fresh); err != nil {
		t.Fatal(err)
	}
	// The new key cannot pass for the old one.
	if err := Verify(set2, Signed{Receipt: fresh.Receipt, Signature: fresh.Signature, KeyID: old.KeyID}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a new signature under the old key id: %v", err)
	}

	// No private key in clear on disk: neither its seed nor its whole form.
	keys, err := store.ReceiptKeys(bg)
	if err != nil {
		t.Fatal(err)
	}
	var secrets [][]byte
	for _, k := range keys {
		priv, err := OpenKey(testSealer(t, 7), k)
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, priv.Seed(), priv)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	assertNotInDir(t, dir, secrets...)
	// Another sealing key cannot open it, and says so without the key.
	if _, err := OpenKey(testSealer(t, 8), keys[0]); err == nil || strings.Contains(err.Error(), string(keys[0].SealedPrivateKey)) {
		t.Fatalf("opened under another sealing key: %v", err)
	}
}

// TestTwoInstancesOnePostgres: two instances on one PostgreSQL ledger with the same sealing
// key, starting together, sign with one key, and a receipt of either verifies with the key
// list of the other.
func TestTwoInstancesOnePostgres(t *testing.T) {
	url := pgtest.NewDatabase(t)
	var sgs [2]*Signer
	var stores [2]*pgledger.Postgres
	for i := range sgs {
		s, err := pgledger.OpenPostgres(bg, url, pgledger.PostgresOptions{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
		sgs[i] = New(s, testSealer(t, 9))
	}
	var signed [2]Signed
	errs := make(chan error, 2)
	for i := range sgs {
		go func() {
			var err error
			signed[i], err = sgs[i].Sign(bg, sampleReceipt())
			errs <- err
		}()
	}
	for range sgs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if signed[0].KeyID != signed[1].KeyID {
		t.Fatalf("the instances signed with %s and %s", signed[0].KeyID, signed[1].KeyID)
	}
	for i := range sgs {
		set, err := sgs[1-i].PublicKeys(bg)
		if err != nil || len(set.Keys) != 1 {
			t.Fatalf("keys: %+v %v", set, err)
		}
		if err := Verify(set, signed[i]); err != nil {
			t.Fatalf("instance %d's receipt with the other's list: %v", i, err)
		}
	}
	// A rotation on one is what the other signs with next.
	cur, err := sgs[0].Rotate(bg)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := sgs[1].Sign(bg, sampleReceipt())
	if err != nil || s1.KeyID != cur.KeyID {
		t.Fatalf("after a rotation on the other instance: %s %v, want %s", s1.KeyID, err, cur.KeyID)
	}
	// The private key is in no row of the database in clear (as PostgreSQL prints a row: bytea
	// in hex).
	keys, _ := stores[0].ReceiptKeys(bg)
	conn, err := pgx.Connect(bg, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(bg)
	rows, _ := conn.Query(bg, `SELECT t::text FROM receipt_keys t`)
	texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(texts) != 2 {
		t.Fatalf("rows %q %v", texts, err)
	}
	for _, k := range keys {
		priv, err := OpenKey(testSealer(t, 9), k)
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range texts {
			if strings.Contains(row, hex.EncodeToString(priv.Seed())) {
				t.Fatalf("key %s's seed is in a row in clear", k.ID)
			}
		}
	}
}

func assertNotInDir(t *testing.T, dir string, secrets ...[]byte) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, s := range secrets {
			if bytes.Contains(data, s) {
				t.Errorf("%s holds a private receipt key in clear", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestVerifyRefusesRepeatedMembers: a receipt with a member twice is refused, whichever copy
// the signature holds for and however the name is written, at any depth; RFC 8785 accepts no
// such input and readers disagree on its value (one that keeps the first would read 500).
func TestVerifyRefusesRepeatedMembers(t *testing.T) {
	store, err := badgerledger.Open(t.TempDir(), badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sg := New(store, testSealer(t, 7))
	set, err := sg.PublicKeys(bg)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := sg.Sign(bg, sampleReceipt())
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(set, sr); err != nil {
		t.Fatalf("the receipt as signed: %v", err)
	}
	r := string(sr.Receipt)
	if !strings.Contains(r, `"credits":1,`) {
		t.Fatalf("no credits member to repeat: %s", r)
	}
	for _, forged := range []string{
		strings.Replace(r, `"credits":1,`, `"credits":500,"credits":1,`, 1),
		strings.Replace(r, `"credits":1,`, `"credits":1,"credits":500,`, 1),
		strings.Replace(r, `"credits":1,`, `"cr\u0065dits":500,"credits":1,`, 1),
		strings.Replace(r, `"credits":1,`, `"credits":1,"extra":{"a":[{"b":1,"b":2}]},`, 1),
	} {
		err := Verify(set, Signed{Receipt: []byte(forged), Signature: sr.Signature, KeyID: sr.KeyID})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "twice") {
			t.Errorf("a receipt with a repeated member %s: %v", forged, err)
		}
	}
}

// TestSigningKeyCoversReceiptTime: Ensure makes the first key, whose period then holds every
// later receipt; after a rotation the old key's valid_until is the new key's valid_from (no gap,
// no overlap), a receipt dated before the rotation, signed again, is still the old key's, and
// one dated after it the new key's: every listed period holds what its key signed.
func TestSigningKeyCoversReceiptTime(t *testing.T) {
	store, err := badgerledger.Open(t.TempDir(), badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sg := New(store, testSealer(t, 7))
	if err := sg.Ensure(bg); err != nil {
		t.Fatal(err)
	}
	keys, err := store.ReceiptKeys(bg)
	if err != nil || len(keys) != 1 || !keys[0].ValidUntil.IsZero() {
		t.Fatalf("keys after Ensure: %+v %v", keys, err)
	}
	first := keys[0]
	if err := sg.Ensure(bg); err != nil {
		t.Fatal(err)
	}
	if keys, _ = store.ReceiptKeys(bg); len(keys) != 1 {
		t.Fatalf("a second Ensure made another key: %+v", keys)
	}
	cur, err := sg.Rotate(bg)
	if err != nil {
		t.Fatal(err)
	}
	keys, err = store.ReceiptKeys(bg)
	if err != nil || len(keys) != 2 || keys[0].ID != first.ID || keys[1].ID != cur.KeyID {
		t.Fatalf("keys after the rotation: %+v %v", keys, err)
	}
	if !keys[0].ValidUntil.Equal(keys[1].ValidFrom) || !keys[1].ValidUntil.IsZero() {
		t.Fatalf("the periods leave a gap or overlap: %+v", keys)
	}
	signAt := func(at time.Time) string {
		t.Helper()
		g := sampleReceipt()
		g.Time = Time(at)
		sr, err := sg.Sign(bg, g)
		if err != nil {
			t.Fatal(err)
		}
		return sr.KeyID
	}
	rotation := keys[1].ValidFrom
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{rotation.Add(-time.Second), first.ID}, // charged before the rotation, signed after it
		{rotation.Add(time.Second), cur.KeyID},
		{rotation.Add(24 * time.Hour), cur.KeyID},
	} {
		if got := signAt(c.at); got != c.want {
			t.Errorf("a receipt dated %s signed with %s, want %s (keys %+v)", Time(c.at), got, c.want, keys)
		}
	}
	// The periods a customer reads say the same.
	set, err := sg.PublicKeys(bg)
	if err != nil || len(set.Keys) != 2 || set.Keys[0].ValidUntil != set.Keys[1].ValidFrom {
		t.Fatalf("the published list: %+v %v", set, err)
	}
}

// TestKeyAt: the key of a receipt's time (whole seconds) among periods that begin within a
// second, at their bounds: the second a key is made or rotated in is that key's.
func TestKeyAt(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 5e8, time.UTC)
	t1, t2 := t0.Add(time.Hour), t0.Add(2*time.Hour)
	keys := []ledger.ReceiptKey{{ID: "a", ValidFrom: t0, ValidUntil: t1}, {ID: "b", ValidFrom: t1, ValidUntil: t2}, {ID: "c", ValidFrom: t2}}
	sec := func(h, m, s int) time.Time { return time.Date(2030, 1, 1, h, m, s, 0, time.UTC) }
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{time.Time{}, "c"}, {sec(0, 0, 0).Add(-time.Hour), "a"}, {sec(0, 0, 0), "a"}, {sec(0, 59, 59), "a"}, {sec(1, 0, 0), "b"},
		{sec(1, 59, 59), "b"}, {sec(2, 0, 0), "c"}, {sec(3, 0, 0), "c"},
	} {
		if got := keyAt(keys, c.at).ID; got != c.want {
			t.Errorf("keyAt(%s) = %s, want %s", c.at, got, c.want)
		}
	}
}
