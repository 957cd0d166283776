package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/caddy-textgen/textgen/caddymodule/internal/progress"
)

// The progress of the long commands (ledger verify, ledger migrate, backup, restore): on
// stderr, a bar on a terminal and a plain line every few seconds otherwise, nothing with
// --quiet (internal/progress). Standard output, and so --json, is the same with or without it.

func quietFlag(c *cobra.Command) {
	c.Flags().BoolP("quiet", "q", false, "Show no progress on stderr (without it: a bar on a terminal, else a line every 5 seconds once the command has run for 5 seconds)")
}

// progress is the command's reporter on stderr; close it before the command returns, so that a
// bar's line is ended before the result or the error is printed.
func (c *cliContext) progress() *progress.Reporter { return progress.Stderr(c.fl.Bool("quiet")) }

// verifyReport asks the server to verify its ledger and returns the report's JSON, as the admin
// API answers it without progress. It asks for progress lines (?progress=, reports.go verify),
// whose counts it gives p; a server that sends none answers with the report alone.
func (c *cliContext) verifyReport(p *progress.Reporter) (json.RawMessage, error) {
	api, err := c.api()
	if err != nil {
		return nil, err
	}
	every := min(p.Interval(), time.Second)
	resp, err := api.request(context.Background(), http.MethodGet, "/textgen/ledger/verify", url.Values{"progress": {every.String()}}, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != ndjsonType {
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("reading the admin API's answer: %w", err)
		}
		return raw, nil
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var line struct {
			Progress *struct {
				Done  int64 `json:"done"`
				Total int64 `json:"total"`
			} `json:"progress"`
			Report json.RawMessage `json:"report"`
			Error  *string         `json:"error"`
			Status int             `json:"status"`
		}
		if err := dec.Decode(&line); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("reading the admin API's answer: %w", err)
		}
		switch {
		case line.Error != nil:
			return nil, &adminAPIError{Status: line.Status, Message: *line.Error}
		case line.Report != nil:
			return line.Report, nil
		case line.Progress != nil:
			p.Set(line.Progress.Done, line.Progress.Total)
		}
	}
}
