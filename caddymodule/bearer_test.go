package caddymodule

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestBearerKey: Authorization: Bearer <key> is accepted as X-API-Key is (generate and balance,
// any case of the scheme); both headers with the same key are fine, with different keys a 400
// that costs nothing; another scheme is no key; a wrong bearer key is a failed authentication.
func TestBearerKey(t *testing.T) {
	fs := fastBackend(t)
	e := newEnv(t, envOptions{ollama: fs.URL, limits: "auth_failure_limit 2/1h"})
	acct, key := e.account(10)
	_, other := e.account(10)
	body := genBody("summarizer", "x", "en", "")
	send := func(hdr ...string) (*http.Response, string) {
		t.Helper()
		resp, err := e.post(context.Background(), "", body, hdr...)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	for _, h := range [][]string{
		{"Authorization", "Bearer " + key},
		{"Authorization", "bearer " + key},
		{"Authorization", "Bearer " + key, "X-API-Key", key},
	} {
		if resp, text := send(h...); resp.StatusCode != 200 || resp.Header.Get("X-Credits-Used") != "1" {
			t.Fatalf("%q: %d %s", h[0]+" "+h[1][:7], resp.StatusCode, text)
		}
	}
	if resp, text := send("Authorization", "Bearer "+key, "X-API-Key", other); resp.StatusCode != 400 || !strings.Contains(text, "conflicting_api_keys") {
		t.Fatalf("two different keys: %d %s", resp.StatusCode, text)
	}
	if resp, text := send("Authorization", "Basic dXNlcjpwYXNz"); resp.StatusCode != 401 || !strings.Contains(text, "missing_api_key") {
		t.Fatalf("Basic: %d %s", resp.StatusCode, text)
	}
	if b := e.balance(acct.ID); b.Balance != 7 || e.holds(acct.ID) != 3 {
		t.Fatalf("balance %+v, %d holds: want the 3 served charged and nothing else", b, e.holds(acct.ID))
	}
	req, _ := http.NewRequest(http.MethodGet, baseURL+"/api/v1/balance", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"balance":7`) {
		t.Fatalf("balance with a bearer key: %d %s", resp.StatusCode, b)
	}
	// Wrong bearer keys count as failed authentications: two, then 429.
	for i, want := range []int{401, 401, 429} {
		if resp, text := send("Authorization", "Bearer tg_live_wrong"); resp.StatusCode != want {
			t.Fatalf("wrong bearer key %d: %d %s, want %d", i+1, resp.StatusCode, text, want)
		}
	}
}
