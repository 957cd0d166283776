package operator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// caddy textgen stripe webhook --latest-from <caddy log>: pays the latest Checkout Session that
// My Account created, as its log line records it ("checkout session created", with the account,
// the session and the package), so that a local purchase needs no id copied by hand: with
// stripe-mock the browser lands on a page that does not exist, and its address is not the
// session's id.

// checkoutCreatedMsg is the message of My Account's log line for a new Checkout Session
// (caddymodule/account/buy.go).
const checkoutCreatedMsg = "checkout session created"

func cmdStripeWebhookLatest(c *cliContext) error {
	for _, f := range []string{"account", "session"} {
		if c.fl.String(f) != "" {
			return usagef("--latest-from takes the account and the session from the log: leave out --%s", f)
		}
	}
	path := c.fl.String("latest-from")
	f, err := os.Open(path)
	if err != nil {
		return usagef("--latest-from: %v", err)
	}
	defer f.Close()
	cs, err := latestCheckoutSession(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return sendCheckoutCompleted(c, cs)
}

// latestCheckoutSession returns the last Checkout Session a Caddy log records. It reads both of
// Caddy's log formats: JSON lines, and the console's lines that end with the fields as JSON.
func latestCheckoutSession(r io.Reader) (checkoutSession, error) {
	var last checkoutSession
	found := false
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if i := bytes.Index(line, []byte(checkoutCreatedMsg)); i >= 0 {
			var entry struct {
				Msg string `json:"msg"`
				checkoutSession
			}
			fields := line
			if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("{")) {
				if j := bytes.IndexByte(line[i:], '{'); j >= 0 {
					fields = line[i+j:]
				}
			}
			if json.Unmarshal(fields, &entry) == nil && (entry.Msg == "" || entry.Msg == checkoutCreatedMsg) &&
				entry.ID != "" && entry.Account != "" && entry.Package != "" {
				last, found = entry.checkoutSession, true
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return last, err
		}
	}
	if !found {
		return last, errors.New("no Checkout Session in this log yet: press \"Buy\" on My Account's Buy credits page first")
	}
	if last.Credits <= 0 || last.PriceCents <= 0 {
		return last, fmt.Errorf("the log line of Checkout Session %s names no credits or price: give --account, --session, --package, --credits and --amount-cents instead", last.ID)
	}
	return last, nil
}
