package webarea

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestReadForm: a form from the page's own site is read; one from another site, and one
// larger than MaxFormBytes, get the area's error page and are not read.
func TestReadForm(t *testing.T) {
	origin := http.NewCrossOriginProtection()
	post := func(body string, header map[string]string) (*httptest.ResponseRecorder, *http.Request, bool) {
		r := httptest.NewRequest("POST", "https://area.example/area/login", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range header {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		ok := ReadForm(w, r, origin, zap.NewNop(), func(status int, title, msg string) {
			w.WriteHeader(status)
			w.WriteString(title + ": " + msg)
		})
		return w, r, ok
	}
	w, r, ok := post("email=a%40example.com", map[string]string{"Sec-Fetch-Site": "same-origin"})
	if !ok || r.PostFormValue("email") != "a@example.com" || w.Body.Len() != 0 {
		t.Fatalf("a same-origin form: %v %q %q", ok, r.PostFormValue("email"), w.Body)
	}
	w, r, ok = post("email=a%40example.com", map[string]string{"Sec-Fetch-Site": "cross-site"})
	if ok || w.Code != http.StatusForbidden || r.PostForm != nil {
		t.Fatalf("a cross-site form: %v %d %q", ok, w.Code, w.Body)
	}
	w, _, ok = post("note="+strings.Repeat("x", MaxFormBytes), map[string]string{"Sec-Fetch-Site": "same-origin"})
	if ok || w.Code != http.StatusBadRequest {
		t.Fatalf("a form over the limit: %v %d %q", ok, w.Code, w.Body)
	}
}

// TestTokensEqual: equal tokens match; an empty one matches nothing, not even another empty.
func TestTokensEqual(t *testing.T) {
	if !TokensEqual("abc", "abc") || TokensEqual("abc", "abd") || TokensEqual("", "") || TokensEqual("abc", "") {
		t.Fatal("TokensEqual")
	}
}
