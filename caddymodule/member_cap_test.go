package caddymodule

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// cappedMember makes an organisation with credits whose member has a monthly cap of one credit,
// and returns the organisation, the member's live key and the organisation's own key; the
// member's first request takes the cap.
func (e *env) cappedMember(credits int64) (ledger.Account, string, string) {
	e.t.Helper()
	ctx := context.Background()
	org, own := e.account(credits)
	member, err := e.store.CreateAccount(ctx, fmt.Sprintf("member-%d@example.com", time.Now().UnixNano()))
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.MakeOrganisation(ctx, org.ID); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.AddMember(ctx, org.ID, member.ID, ledger.RoleMember, false); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.SetMemberCap(ctx, org.ID, member.ID, 1); err != nil {
		e.t.Fatal(err)
	}
	key, _, err := e.store.CreateMemberKey(ctx, org.ID, member.ID, ledger.Live, "member's", time.Time{}, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return org, key, own
}

// TestGenerateMemberCap: a member with a cap of 1 credit a month generates once (charged to the
// organisation), then gets 402 member_cap_reached that says when the cap resets (the start of a
// UTC month, also as Retry-After), charges nothing, and leaves the organisation's own key
// working.
func TestGenerateMemberCap(t *testing.T) {
	e := newEnv(t, envOptions{ollama: modelServer(t)})
	ctx := context.Background()
	org, key, own := e.cappedMember(5)
	generate := func(k string) *http.Response {
		t.Helper()
		resp, err := e.post(ctx, k, genBody("summarizer", "x", "en", ""))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := generate(key)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the member's first request: %d", resp.StatusCode)
	}
	conf := newConformance(t, e.client)
	req, _ := http.NewRequest(http.MethodPost, baseURL+"/api/v1/generate", strings.NewReader(genBody("summarizer", "x", "en", "")))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	conf.check(req, resp)
	b := decodeErr(t, resp)
	resets := regexp.MustCompile(`resets at (\d{4}-\d{2})-01T00:00:00Z`).FindStringSubmatch(b.Error.Message)
	retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != 402 || b.Error.Code != "member_cap_reached" || resets == nil || retry < 1 || retry > 31*24*3600 ||
		resp.Header.Get("X-Credits-Used") != "0" || strings.Contains(b.Error.Message, key) {
		t.Fatalf("over the cap: %d %+v %v", resp.StatusCode, b.Error, resp.Header)
	}
	if bal := e.balance(org.ID); bal.Balance != 4 || bal.Available != 4 {
		t.Fatalf("balance after the refused request: %+v", bal)
	}
	resp = generate(own)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the organisation's own key: %d", resp.StatusCode)
	}
}
