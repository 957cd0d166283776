package operator

import (
	"strings"
	"testing"
)

// latestCheckoutSession reads the last "checkout session created" line of a Caddy log, in JSON
// (what Caddy writes to a file) or in the console format, and skips lines that only mention it.
func TestLatestCheckoutSession(t *testing.T) {
	log := strings.Join([]string{
		`{"level":"info","ts":1764300000.1,"logger":"http.handlers.textgen_account","msg":"checkout session created","account":"acct_old","package":"10","credits":10,"price_cents":200,"checkout_session":"cs_test_old"}`,
		`{"level":"info","ts":1764300001.2,"logger":"http.log.access","msg":"handled request","request":{"uri":"/account/buy"}}`,
		`2026/11/28 03:00:00.000	INFO	http.handlers.textgen_account	checkout session created	{"account": "acct_new", "package": "big", "credits": 100, "price_cents": 1500, "checkout_session": "cs_test_new"}`,
		`{"level":"info","msg":"someone wrote checkout session created in a field","note":"checkout session created"}`,
		"",
	}, "\n")
	cs, err := latestCheckoutSession(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := checkoutSession{ID: "cs_test_new", Account: "acct_new", Package: "big", Credits: 100, PriceCents: 1500}
	if cs != want {
		t.Fatalf("got %+v, want %+v", cs, want)
	}

	if _, err := latestCheckoutSession(strings.NewReader(`{"msg":"handled request"}` + "\n")); err == nil || !strings.Contains(err.Error(), `press "Buy"`) {
		t.Fatalf("a log without a session: %v", err)
	}
	// A line of an older server, without the package's credits and price: say what to give instead.
	old := `{"msg":"checkout session created","account":"acct_a","package":"10","checkout_session":"cs_test_a"}`
	if _, err := latestCheckoutSession(strings.NewReader(old)); err == nil || !strings.Contains(err.Error(), "--amount-cents") {
		t.Fatalf("a line without credits: %v", err)
	}
}
