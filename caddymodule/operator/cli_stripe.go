package operator

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"
)

// caddy textgen stripe webhook: sends My Account's Stripe webhook a checkout.session.completed
// event, signed with the endpoint's secret exactly as Stripe signs it, for a paid Checkout
// Session. With stripe-mock (which creates sessions but sends no webhooks) it completes a local
// purchase without a Stripe account; against a real site it credits the account, like a payment
// would, so it is an operator's tool: it needs the webhook secret.

// webhookSecretEnv is where the command reads the secret when --secret is not given; the example
// Caddyfile reads the same variable.
const webhookSecretEnv = "TEXTGEN_STRIPE_WEBHOOK_SECRET"

// The defaults name My Account's default package (account.DefaultPackages) on the example
// Caddyfile's address.
const (
	defaultWebhookURL       = "http://localhost:8080/account/stripe/webhook"
	defaultPackage          = "10"
	defaultPackage10Credits = 10
	defaultPackageCents     = 200
)

// webhookResult is what the command prints with --json.
type webhookResult struct {
	URL             string `json:"url"`
	Event           string `json:"event"`
	CheckoutSession string `json:"checkout_session"`
	AccountID       string `json:"account_id"`
	Package         string `json:"package"`
	Credits         int64  `json:"credits"`
	AmountCents     int64  `json:"amount_cents"`
	HTTPStatus      int    `json:"http_status"`
	Reply           string `json:"reply"` // the webhook's answer ("credited", "duplicate: ...")
}

func cmdStripeWebhook(c *cliContext) error {
	if c.fl.String("latest-from") != "" {
		return cmdStripeWebhookLatest(c)
	}
	acct, err := requireAccount(c.fl)
	if err != nil {
		return err
	}
	credits, err := c.fl.GetInt64("credits")
	if err != nil || credits <= 0 {
		return usagef("--credits must be a whole number above 0")
	}
	cents, err := c.fl.GetInt64("amount-cents")
	if err != nil || cents <= 0 {
		return usagef("--amount-cents must be a whole number above 0")
	}
	pkg := c.fl.String("package")
	if pkg == "" {
		return usagef("--package is required")
	}
	session := c.fl.String("session")
	if session == "" {
		b := make([]byte, 12)
		rand.Read(b)
		session = "cs_test_local_" + hex.EncodeToString(b)
	}
	return sendCheckoutCompleted(c, checkoutSession{ID: session, Account: acct, Package: pkg, Credits: credits, PriceCents: cents})
}

// checkoutSession is what the webhook is told of a paid Checkout Session.
type checkoutSession struct {
	ID         string `json:"checkout_session"`
	Account    string `json:"account"`
	Package    string `json:"package"`
	Credits    int64  `json:"credits"`
	PriceCents int64  `json:"price_cents"`
}

// sendCheckoutCompleted signs and sends the webhook a checkout.session.completed of cs, paid.
func sendCheckoutCompleted(c *cliContext, cs checkoutSession) error {
	session, acct, pkg, credits, cents := cs.ID, cs.Account, cs.Package, cs.Credits, cs.PriceCents
	secret := c.fl.String("secret")
	if secret == "" {
		secret = os.Getenv(webhookSecretEnv)
	}
	if secret == "" {
		return usagef("--secret is required (the webhook signing secret, whsec_...), or set %s", webhookSecretEnv)
	}
	target := c.fl.String("url")
	payload, err := checkoutCompleted(session, acct, pkg, credits, cents)
	if err != nil {
		return err
	}
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: time.Now()})
	req, err := http.NewRequest(http.MethodPost, target, bytes.NewReader(payload))
	if err != nil {
		return usagef("--url: %v", err)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Stripe-Signature", signed.Header)
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("sending the webhook to %s: %w", target, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	var reply struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(body, &reply) != nil || reply.Status == "" {
		reply.Status = strings.TrimSpace(string(body))
	}
	out := webhookResult{URL: target, Event: "checkout.session.completed", CheckoutSession: session, AccountID: acct,
		Package: pkg, Credits: credits, AmountCents: cents, HTTPStatus: res.StatusCode, Reply: reply.Status}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("the webhook at %s answered %d: %s", target, res.StatusCode, reply.Status)
	}
	// A 200 that credited nothing (an unknown account, a price that differs) is a failure of
	// what the operator asked for.
	if reply.Status != "credited" && !strings.HasPrefix(reply.Status, "duplicate") {
		return fmt.Errorf("nothing was credited: %s (a paid session that credits nothing is listed by 'caddy textgen payments list')", reply.Status)
	}
	return c.printValue(out, func(w io.Writer) {
		fmt.Fprintf(w, "Sent %s for Checkout Session %s (account %s, package %s: %d credits for %d.%02d EUR).\n",
			out.Event, session, acct, pkg, credits, cents/100, cents%100)
		fmt.Fprintf(w, "The webhook answered %d: %s.\n", res.StatusCode, reply.Status)
	})
}

// checkoutCompleted is a checkout.session.completed event for a paid session, with the fields
// and metadata My Account's buy handler gives a session and its webhook reads.
func checkoutCompleted(session, acct, pkg string, credits, cents int64) ([]byte, error) {
	return json.Marshal(map[string]any{
		"id":          "evt_local_" + strings.TrimPrefix(session, "cs_"),
		"object":      "event",
		"type":        "checkout.session.completed",
		"created":     time.Now().Unix(),
		"livemode":    false,
		"api_version": "local",
		"data": map[string]any{"object": map[string]any{
			"id":                  session,
			"object":              "checkout.session",
			"mode":                "payment",
			"status":              "complete",
			"payment_status":      "paid",
			"client_reference_id": acct,
			"amount_total":        cents,
			"currency":            "eur",
			"payment_intent":      "pi_local_" + strings.TrimPrefix(session, "cs_"),
			"metadata": map[string]string{
				"package": pkg, "credits": fmt.Sprint(credits), "price_cents": fmt.Sprint(cents), "account_id": acct,
			},
		}},
	})
}
