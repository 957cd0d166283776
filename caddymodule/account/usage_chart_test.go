package account

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

func TestDashboardChartOfTheLast30Days(t *testing.T) {
	e := newTestEnv(t)
	b := e.browser()
	acct := b.signup("chart@example.com")
	mustGrant(t, e.store, ledger.GrantRequest{AccountID: acct.ID, Mode: ledger.Live, Kind: ledger.KindPurchase,
		Credits: 10, Reference: "cs_test_chart", AmountCents: 200, Currency: "EUR"})
	for i := range 3 {
		requestOn(t, e.store, acct.ID, fmt.Sprint("req_sum", i), "summarizer", ledger.Live, true)
	}
	requestOn(t, e.store, acct.ID, "req_mail", "email-writer", ledger.Live, false)
	requestOn(t, e.store, acct.ID, "req_tr", "translator", ledger.Test, true)

	r := b.get("/account/")
	expectStatus(t, "dashboard", r, http.StatusOK)
	today := time.Now().UTC().Format("2006-01-02")
	first := time.Now().UTC().AddDate(0, 0, 1-chartDays).Format("2006-01-02")
	mustContain(t, "dashboard", r.body,
		`<svg viewBox="0 0 400 180" role="img" aria-label="Requests per day, `+first+` to `+today+`: 5 requests in all, at most 5 on `+today,
		`aria-label="Credits charged per day, `+first+` to `+today+`: 3 credits in all, at most 3 on `+today,
		"<title>"+today+", summarizer: 3 requests</title>",
		"<title>"+today+", summarizer: 3 credits</title>",
		"<title>"+today+", email-writer: 1 request</title>",
		"<title>"+today+", translator: 1 request</title>",
		`href="/account/usage.csv"`,
		// The request ids of the latest requests.
		`<code class="ref">req_sum2</code>`, `<code class="ref">req_mail</code>`)
	// No test credits and no released request in the credits chart.
	mustNotContain(t, "dashboard", r.body, "translator: 1 credit", "email-writer: 1 credit")
	// The table by tool and its total: requests, credits, test credits, not charged.
	table := between(t, r.body, `id="usage-by-tool"`, "</table>")
	mustContain(t, "usage table", squeeze(table),
		`summarizer</span></td><td data-label="Requests" class="num">3</td><td data-label="Credits" class="num">3</td><td data-label="Test credits" class="num">0</td><td data-label="Not charged" class="num">0</td>`,
		`translator</span></td><td data-label="Requests" class="num">1</td><td data-label="Credits" class="num">0</td><td data-label="Test credits" class="num">1</td>`,
		`email-writer</span></td><td data-label="Requests" class="num">1</td><td data-label="Credits" class="num">0</td><td data-label="Test credits" class="num">0</td><td data-label="Not charged" class="num">1</td>`,
		`All tools</th><td data-label="Requests" class="num">5</td><td data-label="Credits" class="num">3</td><td data-label="Test credits" class="num">1</td><td data-label="Not charged" class="num">1</td>`)

}

func TestSummarizeUsage(t *testing.T) {
	first := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	rows := []ledger.UsageRow{
		{Day: "2029-12-31", Tool: "early", Mode: ledger.Live, Requests: 50, Settled: 50, Credits: 50}, // before the window
		{Day: "2030-01-01", Tool: "a", Mode: ledger.Live, Requests: 3, Settled: 2, Voided: 1, Credits: 2},
		{Day: "2030-01-01", Tool: "a", Mode: ledger.Test, Requests: 2, Settled: 2, Credits: 2},
		{Day: "2030-01-30", Tool: "b", Mode: ledger.Live, Requests: 7, Settled: 7, Credits: 7},
		{Day: "2030-01-30", Tool: "c", Mode: ledger.Live, Requests: 1, Settled: 1, Credits: 1},
		{Day: "2030-01-30", Tool: "d", Mode: ledger.Live, Requests: 1, Settled: 1, Credits: 1},
		{Day: "2030-01-30", Tool: "e", Mode: ledger.Live, Requests: 1, Settled: 1, Credits: 1},
		{Day: "2030-01-30", Tool: "f", Mode: ledger.Live, Requests: 1, Settled: 1, Credits: 1},
		{Day: "2030-01-30", Tool: "g", Mode: ledger.Live, Requests: 1, Settled: 1, Credits: 1},
		{Day: "2030-01-31", Tool: "late", Mode: ledger.Live, Requests: 50, Settled: 50, Credits: 50}, // after it
	}
	s := summarizeUsage(rows, first)
	if s.From != "2030-01-01" || s.To != "2030-01-30" {
		t.Fatalf("window %s to %s", s.From, s.To)
	}
	var names []string
	for _, tt := range s.Tools {
		names = append(names, tt.Tool)
	}
	// Most requests first, then by name; early and late are outside the 30 days.
	if got := strings.Join(names, " "); got != "b a c d e f g" {
		t.Fatalf("tools %q", got)
	}
	if s.Total != (toolTotal{Tool: "All tools", Requests: 17, Credits: 14, TestCredits: 2, NotCharged: 1}) {
		t.Fatalf("total %+v", s.Total)
	}
	// Six tools past the first five share the "other tools" colour and bar segment.
	if s.Tools[5].Color != s.Tools[6].Color || s.Tools[4].Color == s.Tools[5].Color {
		t.Fatalf("colours %+v", s.Tools)
	}
	// Day 30 has 12 requests: the scale goes to 20 and the bar's segments stack from the floor.
	c := s.Requests
	if c.Max != 20 {
		t.Fatalf("scale to %d", c.Max)
	}
	var day30 []chartBar
	for _, bar := range c.Bars {
		if strings.HasPrefix(bar.Title, "2030-01-30") {
			day30 = append(day30, bar)
		}
	}
	if len(day30) != 5 || day30[len(day30)-1].Title != "2030-01-30, other tools: 2 requests" {
		t.Fatalf("day 30's segments %+v", day30)
	}
	floor := float64(chartTop + chartPlotH)
	if got := day30[0].Y + day30[0].H; got != floor {
		t.Fatalf("the first segment ends at %v, not at the floor %v", got, floor)
	}
	if top, want := day30[len(day30)-1].Y, yOf(12, 20); top != want {
		t.Fatalf("the bar's top at %v, want %v", top, want)
	}
	if c.Label != "Requests per day, 2030-01-01 to 2030-01-30: 17 requests in all, at most 12 on 2030-01-30. The table below lists them by tool." {
		t.Fatalf("label %q", c.Label)
	}
	// Live credits only: day 1 charged 2 live credits of tool a.
	if got := s.Credits.Bars[0]; got.Title != "2030-01-01, a: 2 credits" {
		t.Fatalf("first credit bar %+v", got)
	}
	// A label under today and every seventh day before it.
	var labels []string
	for _, d := range c.Days {
		labels = append(labels, d.Label)
	}
	if got := strings.Join(labels, " "); got != "01-02 01-09 01-16 01-23 01-30" {
		t.Fatalf("day labels %q", got)
	}
}

func TestNiceMax(t *testing.T) {
	for peak, want := range map[int64]int64{0: 2, 1: 2, 2: 2, 3: 4, 5: 10, 10: 10, 11: 20, 41: 100, 999: 1000, 1001: 2000} {
		if got := niceMax(peak); got != want {
			t.Errorf("niceMax(%d) = %d, want %d", peak, got, want)
		}
	}
}

// between is body from the first from to the next to after it.
func between(t *testing.T, body, from, to string) string {
	t.Helper()
	i := strings.Index(body, from)
	if i < 0 {
		t.Fatalf("no %q in the page", from)
	}
	j := strings.Index(body[i:], to)
	if j < 0 {
		t.Fatalf("no %q after %q", to, from)
	}
	return body[i : i+j]
}

// squeeze drops the white space between tags.
func squeeze(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		b.WriteString(strings.TrimSpace(line))
	}
	return b.String()
}
