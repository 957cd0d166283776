package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
)

// adminClient calls the textgen routes of Caddy's admin API the way caddycmd.AdminAPIRequest
// does (TCP or unix socket, Origin header), but reads the API's JSON errors into plain messages.
type adminClient struct {
	addr      string // as given, for messages
	origin    string
	setOrigin bool // as caddycmd does: not over a unix socket, where the host check is off
	ledger    string
	http      *http.Client
}

func newAdminClient(fl caddycmd.Flags) (*adminClient, error) {
	addr, err := caddycmd.DetermineAdminAPIAddress(fl.String("address"), nil, fl.String("config"), fl.String("adapter"))
	if err != nil {
		return nil, usagef("finding the admin API address: %v", err)
	}
	na, err := caddy.ParseNetworkAddress(addr)
	if err != nil || na.PortRangeSize() > 1 {
		return nil, usagef("invalid admin API address %q (want HOST:PORT or unix//path)", addr)
	}
	network, dialAddr := na.Network, na.JoinHostPort(0)
	origin, setOrigin := "http://"+dialAddr, true
	switch {
	case na.IsUnixNetwork():
		dialAddr, _, _ = strings.Cut(na.Host, "|") // drop the socket's permission bits
		origin, setOrigin = "http://127.0.0.1", false
	case na.IsFdNetwork():
		return nil, usagef("the admin API address %q is a file descriptor; use --address HOST:PORT", addr)
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	return &adminClient{
		addr:      addr,
		origin:    origin,
		setOrigin: setOrigin,
		ledger:    fl.String("ledger"),
		http: &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, network, dialAddr)
			},
			// A server that hangs before it answers (its ledger stuck, say) fails the command
			// instead of hanging it; a backup's body may then stream for as long as it takes.
			ResponseHeaderTimeout: 2 * time.Minute,
		}},
	}, nil
}

// adminAPIError is an error answer of the admin API.
type adminAPIError struct {
	Status  int
	Message string
}

// Is makes an answer that says the outcome is unknown an errOutcomeUnknown (exit 3).
func (e *adminAPIError) Is(target error) bool {
	return target == errOutcomeUnknown && strings.HasPrefix(e.Message, outcomeUnknownPrefix)
}

// outcomeError is a change that was sent but whose answer never came.
type outcomeError struct {
	msg   string
	cause error
}

func (e *outcomeError) Error() string        { return e.msg + " (" + e.cause.Error() + ")" }
func (e *outcomeError) Unwrap() error        { return e.cause }
func (e *outcomeError) Is(target error) bool { return target == errOutcomeUnknown }

func (e *adminAPIError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("the admin API answered %d %s", e.Status, http.StatusText(e.Status))
	}
	return e.Message
}

// request sends one request; an answer >= 400 becomes an *adminAPIError.
func (a *adminClient) request(ctx context.Context, method, path string, q url.Values, body any) (*http.Response, error) {
	if a.ledger != "" {
		if q == nil {
			q = url.Values{}
		}
		q.Set("ledger", a.ledger)
	}
	u := a.origin + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if a.setOrigin {
		req.Header.Set("Origin", a.origin)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		var oe *net.OpError
		if method == http.MethodGet || method == http.MethodHead || (errors.As(err, &oe) && oe.Op == "dial") {
			return nil, fmt.Errorf("cannot reach Caddy's admin API at %s (is Caddy running? set --address or --config): %w", a.addr, err)
		}
		// A change was sent and no answer came: the server may have made it.
		return nil, &outcomeError{msg: outcomeUnknownPrefix + ": the change was sent to Caddy's admin API at " + a.addr +
			" and no answer came; it may have been made", cause: err}
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var eb struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
			eb.Error = strings.TrimSpace(string(b))
			if resp.StatusCode == http.StatusNotFound && strings.HasPrefix(path, adminPrefix) && !strings.Contains(eb.Error, "textgen") {
				eb.Error = "the server at " + a.addr + " has no textgen admin API: is it a Caddy built with caddy-textgen? (" + eb.Error + ")"
			}
		}
		return nil, &adminAPIError{Status: resp.StatusCode, Message: eb.Error}
	}
	return resp, nil
}

// call sends a request and returns the JSON answer, also decoded into out.
func (c *cliContext) call(method, path string, q url.Values, body, out any) (json.RawMessage, error) {
	api, err := c.api()
	if err != nil {
		return nil, err
	}
	resp, err := api.request(context.Background(), method, path, q, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the admin API's answer: %w", err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return nil, fmt.Errorf("the admin API's answer is not what this command expects (%v): %s", err, bytes.TrimSpace(raw))
		}
	}
	return raw, nil
}
