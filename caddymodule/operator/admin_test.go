package operator

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// adminLedger opens a real Badger ledger in a temporary directory through the handler's pool,
// as a textgen handler would, and returns its directory.
func adminLedger(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ledger")
	ref, err := textgenapp.AcquireLedger(dir, badgerledger.Options{DisableSyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ref.Release(); err != nil {
			t.Error(err)
		}
	})
	return ref.Key()
}

// adminDo serves one request with the module's route the way Caddy's admin server does,
// including how it writes an APIError. The ledger is chosen with ?ledger= so that ledgers other
// tests of this package have open do not matter.
func adminDo(t *testing.T, dir, method, path string, body string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	routes := adminAPI{}.Routes()
	if len(routes) != 1 || routes[0].Pattern != "/textgen/" {
		t.Fatalf("routes: %+v", routes)
	}
	if dir != "" {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		path += sep + "ledger=" + url.QueryEscape(dir)
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	w := httptest.NewRecorder()
	if err := routes[0].Handler.ServeHTTP(w, req); err != nil {
		var ae caddy.APIError
		if !errors.As(err, &ae) {
			t.Fatalf("%s %s: a plain error (Caddy would answer 500): %v", method, path, err)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(ae.HTTPStatus)
		json.NewEncoder(w).Encode(map[string]string{"error": ae.Error()})
	}
	var obj map[string]any
	if strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(w.Body.Bytes(), &obj); err != nil {
			t.Fatalf("%s %s: not JSON: %v: %s", method, path, err, w.Body)
		}
	}
	return w, obj
}

func wantStatus(t *testing.T, w *httptest.ResponseRecorder, status int, msg string) {
	t.Helper()
	if w.Code != status {
		t.Errorf("status %d, want %d: %s", w.Code, status, w.Body)
	}
	if msg != "" && !strings.Contains(w.Body.String(), msg) {
		t.Errorf("body does not say %q: %s", msg, w.Body)
	}
}

func TestAdminRoutesErrors(t *testing.T) {
	dir := adminLedger(t)
	w, acct := adminDo(t, dir, "POST", "/textgen/accounts", `{"email":"a@example.com"}`)
	wantStatus(t, w, http.StatusCreated, "")
	id, _ := acct["id"].(string)
	if id == "" {
		t.Fatalf("no id: %v", acct)
	}
	for _, c := range []struct {
		method, path, body string
		status             int
		msg                string
	}{
		{"GET", "/textgen/nope", "", 404, "unknown textgen admin route GET /textgen/nope"},
		{"DELETE", "/textgen/accounts/" + id, "", 405, "method DELETE is not allowed"},
		{"POST", "/textgen/accounts", `{"email":"a@example.com"}`, 409, "exists"},
		{"POST", "/textgen/accounts", `{"email":""}`, 400, "email is required"},
		{"POST", "/textgen/accounts", ``, 400, "JSON object"},
		{"POST", "/textgen/accounts", `[1]`, 400, "invalid JSON"},
		{"POST", "/textgen/accounts", `{"email":"b@example.com","admin":true}`, 400, `unknown field \"admin\"`},
		{"POST", "/textgen/accounts", `{"email":"b@example.com"} {}`, 400, "data after the object"},
		{"GET", "/textgen/accounts/acct_nope", "", 404, "account acct_nope not found"},
		{"GET", "/textgen/accounts?limit=0", "", 400, "limit"},
		{"GET", "/textgen/accounts?limit=abc", "", 400, "limit"},
		{"POST", "/textgen/accounts/" + id + "/keys", `{"mode":"gold"}`, 400, "mode"},
		{"POST", "/textgen/accounts/" + id + "/keys", `{"expires":"2001-01-01T00:00:00Z"}`, 400, "in the past"},
		{"POST", "/textgen/accounts/" + id + "/credits", `{"credits":0}`, 400, "credits"},
		{"POST", "/textgen/accounts/" + id + "/credits", `{"credits":-5}`, 400, "use adjust"},
		{"POST", "/textgen/accounts/" + id + "/credits", `{"credits":1.5}`, 400, "invalid JSON"},
		{"POST", "/textgen/accounts/" + id + "/credits", `{"credits":1000000001}`, 400, "1000000000"},
		{"POST", "/textgen/accounts/" + id + "/adjust", `{"credits":-1}`, 400, "reason is required"},
		{"POST", "/textgen/accounts/" + id + "/adjust", `{"credits":-1,"reason":"x"}`, 409, "below zero"},
		{"POST", "/textgen/accounts/" + id + "/keys/key_nope/revoke", ``, 404, "has no key key_nope"},
		{"GET", "/textgen/usage?from=tomorrow", "", 400, "from"},
		{"GET", "/textgen/usage?account=acct_nope", "", 404, "account acct_nope not found"},
		{"GET", "/textgen/payments?all=maybe", "", 400, "all"},
		{"GET", "/textgen/payments?limit=0", "", 400, "limit"},
		{"GET", "/textgen/payments?cursor=x", "", 400, "no pages"},
		{"POST", "/textgen/payments", "", 405, "method POST is not allowed"},
		{"POST", "/textgen/payments/cs_nope/resolve", `{"note":"refunded"}`, 404, "cs_nope"},
		{"POST", "/textgen/payments/cs_nope/resolve", `{"note":"  "}`, 400, "note is required"},
		{"POST", "/textgen/payments/cs_nope/resolve", `{"note":"x","credits":1}`, 400, `unknown field \"credits\"`},
		{"GET", "/textgen/mail?limit=0", "", 400, "limit"},
		{"GET", "/textgen/mail?limit=1001", "", 400, "limit"},
		{"GET", "/textgen/mail?cursor=x", "", 400, "no pages"},
		{"POST", "/textgen/mail", "", 405, "method POST is not allowed"},
		{"GET", "/textgen/mail/mail_nope/drop", "", 405, "method GET is not allowed"},
		{"POST", "/textgen/mail/mail_nope/drop", "", 404, "e-mail mail_nope"},
		{"POST", "/textgen/mail/mail_nope/drop", `{"force":true}`, 400, `unknown field \"force\"`},
	} {
		w, _ := adminDo(t, dir, c.method, c.path, c.body)
		if w.Code != c.status || !strings.Contains(w.Body.String(), c.msg) {
			t.Errorf("%s %s %s: %d %s, want %d with %q", c.method, c.path, c.body, w.Code, w.Body, c.status, c.msg)
		}
	}
	if w, _ := adminDo(t, dir, "DELETE", "/textgen/accounts/"+id, ""); w.Header().Get("Allow") != "GET" {
		t.Errorf("405 Allow header %q, want GET", w.Header().Get("Allow"))
	}
}

func TestAdminKeysNeverShowDigests(t *testing.T) {
	dir := adminLedger(t)
	_, acct := adminDo(t, dir, "POST", "/textgen/accounts", `{"email":"k@example.com"}`)
	id := acct["id"].(string)
	w, created := adminDo(t, dir, "POST", "/textgen/accounts/"+id+"/keys", `{"mode":"test","name":"n","expires":"1h"}`)
	wantStatus(t, w, http.StatusCreated, "")
	full, _ := created["key"].(string)
	if !strings.HasPrefix(full, "tg_test_") || created["hint"] != "tg_test_…"+full[len(full)-4:] {
		t.Fatalf("created key: %v", created)
	}
	if w.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q on a response with a key", w.Header().Get("Cache-Control"))
	}
	sum := sha256.Sum256([]byte(full))
	for _, path := range []string{"/textgen/accounts/" + id + "/keys", "/textgen/accounts/" + id} {
		w, _ := adminDo(t, dir, "GET", path, "")
		wantStatus(t, w, http.StatusOK, "")
		body := w.Body.String()
		for _, secret := range []string{full, full[8:], hex.EncodeToString(sum[:]), string(sum[:])} {
			if strings.Contains(body, secret) {
				t.Errorf("GET %s shows the key or its digest: %s", path, body)
			}
		}
		if strings.Contains(strings.ToLower(body), "digest") {
			t.Errorf("GET %s: %s", path, body)
		}
	}
	w, rev := adminDo(t, dir, "POST", "/textgen/accounts/"+id+"/keys/"+created["id"].(string)+"/revoke", "")
	wantStatus(t, w, http.StatusOK, "")
	if rev["revoked"] != true || rev["status"] != "revoked" || rev["key"] != nil {
		t.Errorf("revoke: %v", rev)
	}
	w, _ = adminDo(t, dir, "POST", "/textgen/accounts/"+id+"/keys/"+created["id"].(string)+"/revoke", "")
	wantStatus(t, w, http.StatusConflict, "already revoked (since ")
}

func TestAdminLedgerSelection(t *testing.T) {
	a, b := adminLedger(t), adminLedger(t)
	// at least two are open now (other tests of the package may have more)
	w, _ := adminDo(t, "", "GET", "/textgen/ledger/verify", "")
	wantStatus(t, w, http.StatusBadRequest, "choose one with ?ledger=")
	if !strings.Contains(w.Body.String(), a) || !strings.Contains(w.Body.String(), b) {
		t.Errorf("the error does not list the open ledgers: %s", w.Body)
	}
	w, _ = adminDo(t, filepath.Join(t.TempDir(), "other"), "GET", "/textgen/ledger/verify", "")
	wantStatus(t, w, http.StatusNotFound, "no textgen ledger is open at")
	// the same data goes to the chosen ledger only
	adminDo(t, a, "POST", "/textgen/accounts", `{"email":"only-a@example.com"}`)
	_, la := adminDo(t, a, "GET", "/textgen/accounts", "")
	_, lb := adminDo(t, b, "GET", "/textgen/accounts", "")
	if n := len(la["accounts"].([]any)); n != 1 {
		t.Errorf("ledger a has %d accounts, want 1", n)
	}
	if n := len(lb["accounts"].([]any)); n != 0 {
		t.Errorf("ledger b has %d accounts, want 0", n)
	}
	_, ls := adminDo(t, "", "GET", "/textgen/ledgers", "")
	dirs := ls["ledgers"].([]any)
	var found int
	for _, d := range dirs {
		if d == a || d == b {
			found++
		}
	}
	if found != 2 {
		t.Errorf("/textgen/ledgers: %v, want %s and %s among them", dirs, a, b)
	}
}

func TestAdminNoLedger(t *testing.T) {
	if len(textgenapp.OpenLedgers()) > 0 {
		t.Skip("another test of this package has a ledger open; TestCLINoLedger covers this in a process of its own")
	}
	w, _ := adminDo(t, "", "GET", "/textgen/ledger/verify", "")
	wantStatus(t, w, http.StatusServiceUnavailable, "no textgen ledger is open: the config has no textgen handler")
	w, _ = adminDo(t, "", "GET", "/textgen/ledgers", "")
	wantStatus(t, w, http.StatusOK, `"ledgers":[]`)
}

func TestAdminGrantAndBackup(t *testing.T) {
	dir := adminLedger(t)
	_, acct := adminDo(t, dir, "POST", "/textgen/accounts", `{"email":"g@example.com","test_credits":0}`)
	id := acct["id"].(string)
	_, g := adminDo(t, dir, "POST", "/textgen/accounts/"+id+"/credits", `{"credits":10,"reference":"inv-9"}`)
	if g["available"] != 10.0 || g["repeated"] != false || g["credited"] != 10.0 {
		t.Errorf("grant: %v", g)
	}
	_, g = adminDo(t, dir, "POST", "/textgen/accounts/"+id+"/credits", `{"credits":10,"reference":"inv-9"}`)
	if g["available"] != 10.0 || g["repeated"] != true || g["credited"] != 0.0 {
		t.Errorf("repeated grant: %v", g)
	}
	_, g = adminDo(t, dir, "POST", "/textgen/accounts/"+id+"/credits", `{"credits":4,"mode":"test"}`)
	if g["available"] != 4.0 || g["balance"] != 4.0 || g["mode"] != "test" {
		t.Errorf("test grant: %v", g)
	}
	_, bal := adminDo(t, dir, "GET", "/textgen/accounts/"+id+"/balance", "")
	if bal["balance"] != 10.0 || bal["available"] != 10.0 || bal["test_available"] != 4.0 {
		t.Errorf("balance: %v", bal)
	}

	w, _ := adminDo(t, dir, "GET", "/textgen/backup", "")
	wantStatus(t, w, http.StatusOK, "")
	if ct := w.Header().Get("Content-Type"); ct != "application/octet-stream" {
		t.Errorf("backup Content-Type %q", ct)
	}
	sum := sha256.Sum256(w.Body.Bytes())
	if w.Body.Len() == 0 || w.Result().Trailer.Get(backupChecksumTrailer) != hex.EncodeToString(sum[:]) {
		t.Errorf("backup: %d bytes, trailer %q, sha256 %x", w.Body.Len(), w.Result().Trailer.Get(backupChecksumTrailer), sum)
	}
	// the stream is a real backup: it restores into an empty directory
	restored := filepath.Join(t.TempDir(), "restored")
	if err := badgerledger.Restore(restored, bytes.NewReader(w.Body.Bytes())); err != nil {
		t.Fatalf("restoring the downloaded backup: %v", err)
	}
	// not open: the admin API only reaches ledgers a handler opened, never a directory itself
	w, _ = adminDo(t, restored, "GET", "/textgen/ledger/verify", "")
	wantStatus(t, w, http.StatusNotFound, "no textgen ledger is open at")
}

func TestSummarizeUsage(t *testing.T) {
	rows := []ledger.UsageRow{
		{Day: "2025-01-02", Tool: "email-writer", Mode: ledger.Live, Requests: 3, Settled: 2, Voided: 1},
		{Day: "2025-01-01", Tool: "email-writer", Mode: ledger.Live, Requests: 1, Settled: 1},
		{Day: "2025-01-01", Tool: "summarizer", Mode: ledger.Live, Requests: 5, Settled: 5},
		{Day: "2025-01-01", Tool: "summarizer", Mode: ledger.Test, Requests: 7, Settled: 7},
	}
	rep := summarizeUsage(rows)
	want := []usageSum{
		{Tool: "email-writer", Mode: ledger.Live, Requests: 4, Settled: 3, Voided: 1},
		{Tool: "summarizer", Mode: ledger.Live, Requests: 5, Settled: 5},
		{Tool: "summarizer", Mode: ledger.Test, Requests: 7, Settled: 7},
	}
	if !slices.Equal(rep.ByTool, want) {
		t.Errorf("by tool: %+v, want %+v", rep.ByTool, want)
	}
	want = []usageSum{
		{Day: "2025-01-01", Mode: ledger.Live, Requests: 6, Settled: 6},
		{Day: "2025-01-01", Mode: ledger.Test, Requests: 7, Settled: 7},
		{Day: "2025-01-02", Mode: ledger.Live, Requests: 3, Settled: 2, Voided: 1},
	}
	if !slices.Equal(rep.ByDay, want) {
		t.Errorf("by day: %+v, want %+v", rep.ByDay, want)
	}
	want = []usageSum{{Mode: ledger.Live, Requests: 9, Settled: 8, Voided: 1}, {Mode: ledger.Test, Requests: 7, Settled: 7}}
	if !slices.Equal(rep.Total, want) {
		t.Errorf("total: %+v, want %+v", rep.Total, want)
	}
	if empty := summarizeUsage(nil); empty.Rows == nil || empty.ByTool == nil || empty.Total == nil {
		t.Errorf("an empty summary must encode as empty lists, not null: %+v", empty)
	}
}

func TestParseExpiryAndUsageTime(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2030-01-02T03:04:05Z":      time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
		"2030-01-02T03:04:05+02:00": time.Date(2030, 1, 2, 1, 4, 5, 0, time.UTC),
		"720h":                      t0.Add(720 * time.Hour),
		"90d":                       t0.Add(90 * 24 * time.Hour),
	} {
		got, err := parseExpiry(in, t0)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseExpiry(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "soon", "-1h", "0s", "2025-06-01T11:00:00Z", "2025-06-01T12:00:00Z"} {
		if _, err := parseExpiry(in, t0); err == nil {
			t.Errorf("parseExpiry(%q): want an error", in)
		}
	}
	if from, _ := parseUsageTime("2025-01-31", false); !from.Equal(time.Date(2025, 1, 31, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("from day: %v", from)
	}
	// the ledger's upper bound is exclusive: "to" a day means up to the start of the next one
	if to, _ := parseUsageTime("2025-01-31", true); !to.Equal(time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("to day: %v", to)
	}
	if _, err := parseUsageTime("31.01.2025", false); err == nil {
		t.Error("parseUsageTime accepted 31.01.2025")
	}
}

// TestAdminAccountsStartWithTestCredits: an account the operator creates starts with free test
// credits (50 unless the request says), so that its test keys work at once, as a sign-up's do.
func TestAdminAccountsStartWithTestCredits(t *testing.T) {
	dir := adminLedger(t)
	for _, c := range []struct {
		body string
		want float64
	}{
		{`{"email":"default@example.com"}`, 50},
		{`{"email":"none@example.com","test_credits":0}`, 0},
		{`{"email":"seven@example.com","test_credits":7}`, 7},
	} {
		w, acct := adminDo(t, dir, "POST", "/textgen/accounts", c.body)
		wantStatus(t, w, http.StatusCreated, "")
		_, detail := adminDo(t, dir, "GET", "/textgen/accounts/"+acct["id"].(string), "")
		credits, _ := detail["credits"].(map[string]any)
		if credits["test_available"] != c.want || credits["available"] != float64(0) {
			t.Errorf("%s: credits %v, want %v test credits and no live ones", c.body, credits, c.want)
		}
	}
	for _, body := range []string{`{"email":"neg@example.com","test_credits":-1}`, `{"email":"big@example.com","test_credits":10001}`} {
		w, _ := adminDo(t, dir, "POST", "/textgen/accounts", body)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "test_credits must be between 0 and 10000") {
			t.Errorf("%s: %d %s, want 400", body, w.Code, w.Body)
		}
		if _, acct := adminDo(t, dir, "GET", "/textgen/accounts?limit=100", ""); strings.Contains(fmt.Sprint(acct), "neg@") || strings.Contains(fmt.Sprint(acct), "big@") {
			t.Errorf("%s: the account was created anyway", body)
		}
	}
}
