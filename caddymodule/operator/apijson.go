package operator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-textgen/textgen/ledger"
)

// How the admin routes read requests and write answers and errors.

func parseMode(s string) (ledger.Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", string(ledger.Live):
		return ledger.Live, nil
	case string(ledger.Test):
		return ledger.Test, nil
	}
	return "", badRequest("mode: %q is neither %q nor %q", s, ledger.Live, ledger.Test)
}

func pageFromQuery(r *http.Request) (ledger.Page, error) {
	q := r.URL.Query()
	p := ledger.Page{Cursor: q.Get("cursor")}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			return p, badRequest("limit: %q is not a number from 1 to 1000", s)
		}
		p.Limit = n
	}
	return p, nil
}

// limitFromQuery is the ?limit= of a list that has no pages (0 when absent: the ledger's
// default); a cursor is refused.
func limitFromQuery(r *http.Request, list string) (int, error) {
	page, err := pageFromQuery(r)
	if err != nil {
		return 0, err
	}
	if page.Cursor != "" {
		return 0, badRequest("cursor: the %s list has no pages; use limit (at most 1000)", list)
	}
	return page.Limit, nil
}

// decodeAdminJSON reads one JSON object into dst, rejecting unknown fields and trailing data.
// An empty body is accepted when allowEmpty is set.
func decodeAdminJSON(r *http.Request, dst any, allowEmpty bool) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxAdminBody+1))
	if err != nil {
		return badRequest("reading the request body: %v", err)
	}
	if len(body) > maxAdminBody {
		return badRequest("the request body is larger than %d bytes", maxAdminBody)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		if allowEmpty {
			return nil
		}
		return badRequest("the request body must be a JSON object")
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return badRequest("invalid JSON body: %v", err)
	}
	if dec.More() {
		return badRequest("invalid JSON body: data after the object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("invalid JSON body: data after the object")
	}
	return nil
}

func writeAdminJSON(w http.ResponseWriter, status int, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: fmt.Errorf("encoding the response: %w", err)}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err = w.Write(append(body, '\n'))
	if err != nil {
		// The status is sent; nothing better can be done than to log it.
		caddy.Log().Named("admin.api.textgen").Debug("writing the response: " + err.Error())
	}
	return nil
}

func badRequest(format string, args ...any) error {
	return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf(format, args...)}
}

// ledgerError maps a ledger error to its HTTP status, with what was being done as context.
func ledgerError(err error, format string, args ...any) error {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, ledger.ErrDuplicateEmail), errors.Is(err, ledger.ErrAlreadyRevoked),
		errors.Is(err, ledger.ErrInsufficientCredits), errors.Is(err, ledger.ErrAccountDisabled):
		status = http.StatusConflict
	case errors.Is(err, ledger.ErrInvalidArgument):
		status = http.StatusBadRequest
	case errors.Is(err, ledger.ErrClosed):
		status = http.StatusServiceUnavailable
	}
	return caddy.APIError{HTTPStatus: status, Err: fmt.Errorf(format+": %w", append(args, err)...)}
}
