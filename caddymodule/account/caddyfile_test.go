package account

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddytest"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`textgen_account {
		ledger /var/lib/textgen
		path_prefix /me
		session_lifetime 2h
		cookie_name my_session
		stripe_secret_key {env.STRIPE_SECRET_KEY}
		stripe_webhook_secret {env.STRIPE_WEBHOOK_SECRET}
		stripe_api_url http://127.0.0.1:12111
		webhook_tolerance 10m
		package small 10 200
		package big 100 1500 expires 365d
		public_url https://api.example.com
		test_credits 20
		signup_credits 25
		site_name "Example API"
		max_keys 5
		invoice_creation
		tax_id_collection
		refuse_disputed_purchases
		operator_email "Billing <billing@example.com>"
	}`)
	var h Handler
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	want := Handler{
		Ledger: "/var/lib/textgen", PathPrefix: "/me", SessionLifetime: caddy.Duration(2 * time.Hour),
		CookieName: "my_session", StripeSecretKey: "{env.STRIPE_SECRET_KEY}", StripeWebhookSecret: "{env.STRIPE_WEBHOOK_SECRET}",
		StripeAPIURL: "http://127.0.0.1:12111", WebhookTolerance: caddy.Duration(10 * time.Minute),
		Packages:  []Package{{ID: "small", Credits: 10, PriceCents: 200}, {ID: "big", Credits: 100, PriceCents: 1500, Expires: caddy.Duration(365 * 24 * time.Hour)}},
		PublicURL: "https://api.example.com", TestCredits: 20, SignupCredits: 25, SiteName: "Example API", MaxKeys: 5,
		InvoiceCreation: true, TaxIDCollection: true, RefuseDisputedPurchases: true, OperatorEmail: "Billing <billing@example.com>",
	}
	gotJSON, _ := json.Marshal(h)
	wantJSON, _ := json.Marshal(want)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Fatalf("parsed\n%s\nwant\n%s", gotJSON, wantJSON)
	}

	for _, bad := range []string{
		`textgen_account extra`,
		"textgen_account {\n ledger\n}",
		`textgen_account { ledger a b }`,
		`textgen_account { ledger a
			ledger b }`,
		`textgen_account { nonsense 1 }`,
		`textgen_account { invoice_creation yes }`,
		`textgen_account { session_lifetime soon }`,
		`textgen_account { package p10 10 }`,
		`textgen_account { package p10 ten 200 }`,
		`textgen_account { package p10 10 2.00 }`,
		`textgen_account { package p10 10 200 expires }`,
		`textgen_account { package p10 10 200 expires never }`,
		`textgen_account { package p10 10 200 lasts 30d }`,
		`textgen_account { test_credits many }`,
		`textgen_account { signup_credits many }`,
		"textgen_account {\n signup_credits\n}",
		`textgen_account { refuse_disputed_purchases yes }`,
		`textgen_account { operator_email a@example.com b@example.com }`,
		"textgen_account {\n operator_email\n}",
	} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Errorf("parsed without error: %s", bad)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Handler{Ledger: "/x"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for field, h := range map[string]Handler{
		"ledger":              {},
		"path_prefix":         {Ledger: "/x", PathPrefix: "account"},
		"path_prefix /":       {Ledger: "/x", PathPrefix: "/"},
		"path_prefix //":      {Ledger: "/x", PathPrefix: "//"},
		"session_lifetime":    {Ledger: "/x", SessionLifetime: caddy.Duration(365 * 24 * time.Hour)},
		"cookie_name":         {Ledger: "/x", CookieName: "bad name;"},
		"package":             {Ledger: "/x", Packages: []Package{{ID: "a b", Credits: 1, PriceCents: 100}}},
		"package twice":       {Ledger: "/x", Packages: []Package{{ID: "a", Credits: 1, PriceCents: 100}, {ID: "a", Credits: 2, PriceCents: 200}}},
		"package credits":     {Ledger: "/x", Packages: []Package{{ID: "a", Credits: 0, PriceCents: 100}}},
		"package price":       {Ledger: "/x", Packages: []Package{{ID: "a", Credits: 1, PriceCents: 10}}},
		"package expires":     {Ledger: "/x", Packages: []Package{{ID: "a", Credits: 1, PriceCents: 100, Expires: caddy.Duration(time.Minute)}}},
		"public_url":          {Ledger: "/x", PublicURL: "api.example.com"},
		"public_url path":     {Ledger: "/x", PublicURL: "https://api.example.com/account"},
		"stripe_api_url":      {Ledger: "/x", StripeAPIURL: "ftp://x"},
		"test_credits":        {Ledger: "/x", TestCredits: -1},
		"signup_credits":      {Ledger: "/x", SignupCredits: -1},
		"signup_credits big":  {Ledger: "/x", SignupCredits: 1_000_001},
		"webhook_tolerance":   {Ledger: "/x", WebhookTolerance: -1},
		"operator_email":      {Ledger: "/x", OperatorEmail: "not an address", SMTP: &SMTP{Host: "h", From: "a@example.com"}, PublicURL: "https://x.example"},
		"operator_email smtp": {Ledger: "/x", OperatorEmail: "ops@example.com"},
	} {
		err := h.Validate()
		name := strings.Fields(field)[0]
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: Validate() = %v, want an error naming %s", field, err, name)
		}
	}
}

// TestCaddyfileAdapt checks the adapted JSON of the golden files in testdata/caddyfile_adapt
// (a Caddyfile, a line of ten dashes, the JSON). UPDATE_GOLDEN=1 rewrites them.
func TestCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob("testdata/caddyfile_adapt/*.caddyfiletest")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.SplitN(string(data), "----------", 2)
		if len(parts) != 2 {
			t.Fatalf("%s: no ---------- separator", f)
		}
		if os.Getenv("UPDATE_GOLDEN") != "" {
			out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(parts[0]), nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var pretty bytes.Buffer
			json.Indent(&pretty, out, "", "\t")
			os.WriteFile(f, []byte(parts[0]+"----------\n"+pretty.String()+"\n"), 0o644)
			continue
		}
		if !caddytest.CompareAdapt(t, f, parts[0], "caddyfile", strings.TrimSpace(parts[1])) {
			t.Errorf("%s: adapted JSON differs", f)
		}
	}
}
