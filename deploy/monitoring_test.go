// Package deploy holds the tests of what an operator deploys besides the binary: the alerting
// rules and the Grafana dashboard (checked with Prometheus's own parsers), the compose file, and
// the release packages (goreleaser, the .deb and .rpm, the systemd unit). It is a module of its
// own so that Prometheus and goreleaser stay out of the plugin's go.mod.
package deploy

import (
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// metricNames returns the metric names an expression selects; it fails the test when the
// expression does not parse.
func metricNames(t *testing.T, what, expr string) []string {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %v\n%s", what, err, expr)
		return nil
	}
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs.Name)
		}
		return nil
	})
	return out
}

// TestAlertingRules parses monitoring/alerts.yml with Prometheus's rule file parser (the one
// `promtool check rules` uses), and checks that every rule is an alert with a wait, a severity
// and a summary and description, on the plugin's series only, and that the rules cover what
// must wake someone.
func TestAlertingRules(t *testing.T) {
	groups, errs := rulefmt.ParseFile("monitoring/alerts.yml", false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("alerts.yml: %v", errs)
	}
	seen := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("rule %q is not an alert", r.Record)
				continue
			}
			seen[r.Alert] = true
			if r.For == 0 {
				t.Errorf("%s fires on one bad scrape (no for:)", r.Alert)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: no summary or description", r.Alert)
			}
			names := metricNames(t, r.Alert, r.Expr)
			if len(names) == 0 {
				t.Errorf("%s selects no series", r.Alert)
			}
			for _, n := range names {
				if !strings.HasPrefix(n, "caddy_textgen_") {
					t.Errorf("%s uses %s, not a series of the plugin", r.Alert, n)
				}
			}
		}
	}
	for _, want := range []string{"TextgenLedgerUnavailable", "TextgenNoHealthyModelHost", "TextgenHoldsStuck",
		"TextgenUnmatchedPayment", "TextgenDisputeOpen", "TextgenMailStuck", "TextgenLedgerDiskNearlyFull"} {
		if !seen[want] {
			t.Errorf("no alert %s", want)
		}
	}
}

// dashboard is what the test reads of a Grafana dashboard.
type dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// TestGrafanaDashboard reads monitoring/grafana-dashboard.json and parses every panel's query
// with Prometheus's PromQL parser (Grafana's variables replaced as Grafana would), and checks
// that the dashboard shows what an operator watches.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("monitoring/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.Title == "" || d.UID == "" {
		t.Fatalf("dashboard without title or uid: %q %q", d.Title, d.UID)
	}
	grafanaVars := strings.NewReplacer("$__rate_interval", "1m", "$instance", ".*")
	used := map[string]bool{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range metricNames(t, p.Title, grafanaVars.Replace(tg.Expr)) {
				used[n] = true
			}
		}
	}
	for _, want := range []string{
		"caddy_textgen_requests_total", "caddy_textgen_backend_errors_total", "caddy_textgen_rejections_total",
		"caddy_textgen_credits_total", "caddy_textgen_time_to_first_piece_seconds_bucket",
		"caddy_textgen_generation_duration_seconds_bucket", "caddy_textgen_holds_open", "caddy_textgen_model_in_flight",
		"caddy_textgen_queue_length", "caddy_textgen_model_hosts", "caddy_textgen_ledger_unavailable",
		"caddy_textgen_limits_store_unavailable", "caddy_textgen_mail_queued", "caddy_textgen_refunds_total",
		"caddy_textgen_disputes_open",
	} {
		if !used[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
}
