package operator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/progress"
	"github.com/caddy-textgen/textgen/ledger"
)

// TestAdminVerifyProgress: with ?progress= the verification is a stream of JSON lines, the
// accounts done from 0 to all of them and then the report, the same bytes as the answer without
// it; a progress that is not a duration is refused.
func TestAdminVerifyProgress(t *testing.T) {
	dir := adminLedger(t)
	for i := range 3 {
		adminDo(t, dir, "POST", "/textgen/accounts", fmt.Sprintf(`{"email":"p%d@example.com"}`, i))
	}
	plain, _ := adminDo(t, dir, "GET", "/textgen/ledger/verify", "")
	wantStatus(t, plain, http.StatusOK, `"ok":true`)

	w, _ := adminDo(t, dir, "GET", "/textgen/ledger/verify?progress=0s", "")
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != ndjsonType {
		t.Fatalf("status %d, Content-Type %q: %s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	lines := strings.Split(strings.TrimSuffix(w.Body.String(), "\n"), "\n")
	want := []string{
		`{"progress":{"done":0,"total":3}}`, `{"progress":{"done":1,"total":3}}`,
		`{"progress":{"done":2,"total":3}}`, `{"progress":{"done":3,"total":3}}`,
		`{"report":` + strings.TrimSuffix(plain.Body.String(), "\n") + `}`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("stream:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}

	// an interval longer than the verification: the first line, then the report
	w, _ = adminDo(t, dir, "GET", "/textgen/ledger/verify?progress=1h", "")
	if got := strings.Count(w.Body.String(), "\n"); got != 2 || !strings.HasPrefix(w.Body.String(), `{"progress":{"done":0,"total":3}}`) {
		t.Errorf("stream at 1h:\n%s", w.Body)
	}

	w, _ = adminDo(t, dir, "GET", "/textgen/ledger/verify?progress=soon", "")
	wantStatus(t, w, http.StatusBadRequest, `progress: \"soon\" is not a duration`)
}

// verifyClient is a CLI context whose admin API is srv.
func verifyClient(srv *httptest.Server) *cliContext {
	return &cliContext{client: &adminClient{addr: srv.Listener.Addr().String(), origin: srv.URL, http: srv.Client()}}
}

// TestVerifyReportStream: the CLI reads the stream's counts into its reporter and returns the
// report as the server wrote it; an error line is the admin API's error (its status and message,
// so the exit code is the same as without a stream), a stream cut before its report is an error,
// and a server that does not stream answers with the report alone.
func TestVerifyReportStream(t *testing.T) {
	report := `{"ok":true,"accounts":2,"entries":0,"problems":[]}`
	for _, c := range []struct {
		name    string
		serve   func(w http.ResponseWriter)
		want    string // the report returned
		wantErr string
		status  int
	}{
		{"stream", func(w http.ResponseWriter) {
			st := &progressStream{w: w}
			st.progress(0, 2)
			st.progress(2, 2)
			st.line(map[string]json.RawMessage{"report": json.RawMessage(report)})
		}, report, "", 0},
		{"error", func(w http.ResponseWriter) {
			st := &progressStream{w: w}
			st.progress(0, 2)
			st.fail(ledgerError(ledger.ErrClosed, "verifying the ledger"))
		}, "", "verifying the ledger: " + ledger.ErrClosed.Error(), http.StatusServiceUnavailable},
		{"cut", func(w http.ResponseWriter) {
			(&progressStream{w: w}).progress(0, 2)
		}, "", "reading the admin API's answer: unexpected EOF", 0},
		{"no stream", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, report+"\n")
		}, report + "\n", "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var asked string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				asked = r.URL.Query().Get("progress")
				c.serve(w)
			}))
			defer srv.Close()
			var out bytes.Buffer
			p := progress.New(&out, progress.Options{Interval: 0})
			p.Start("verifying", "accounts")
			raw, err := verifyClient(srv).verifyReport(p)
			p.Done()
			if asked != "0s" {
				t.Errorf("asked for progress=%q, want the reporter's interval 0s", asked)
			}
			var ae *adminAPIError
			switch {
			case c.wantErr == "" && (err != nil || string(raw) != c.want):
				t.Errorf("report %q, %v; want %q", raw, err, c.want)
			case c.wantErr != "" && (err == nil || err.Error() != c.wantErr):
				t.Errorf("error %v, want %q", err, c.wantErr)
			case c.status != 0 && (!errors.As(err, &ae) || ae.Status != c.status):
				t.Errorf("error %#v, want an admin API error with status %d", err, c.status)
			}
			if c.name == "stream" && !strings.Contains(out.String(), "verifying: 2 of 2 accounts (100%)") {
				t.Errorf("the reporter was not given the counts: %q", out.String())
			}
		})
	}
}
