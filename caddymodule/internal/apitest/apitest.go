// Package apitest reads the API's answers for the tests of the in-process Caddy (caddymodule)
// and of the built binary (caddymodule/binarytest): the JSON error, server-sent events, the
// Prometheus series, the receipt keys, and the API document with every object closed.
package apitest

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/caddymodule/internal/receipts"
)

// ErrBody is the JSON error every refusal of the API answers.
type ErrBody struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Param     string `json:"param"`
		RequestID string `json:"request_id"`
	} `json:"error"`
}

// DecodeErr reads resp's body as the API's JSON error and closes it.
func DecodeErr(t testing.TB, resp *http.Response) ErrBody {
	t.Helper()
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var b ErrBody
	if err := json.Unmarshal(data, &b); err != nil {
		t.Fatalf("error body is not JSON: %q", data)
	}
	return b
}

// SSEEvent is one server-sent event: its name and its data lines joined.
type SSEEvent struct {
	Name, Data string
}

// ReadSSE reads the events of a text/event-stream body until it ends.
func ReadSSE(r io.Reader) ([]SSEEvent, error) {
	var out []SSEEvent
	sc := bufio.NewScanner(r)
	var cur SSEEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Name != "" || cur.Data != "" {
				out = append(out, cur)
			}
			cur = SSEEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data += strings.TrimPrefix(line, "data: ")
		}
	}
	return out, sc.Err()
}

// ParseMetrics reads the caddy_textgen_ series of a Prometheus text answer.
func ParseMetrics(t testing.TB, resp *http.Response) map[string]float64 {
	t.Helper()
	if resp.StatusCode != 200 {
		t.Fatalf("metrics endpoint: %d", resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, "caddy_textgen_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// KeyHolding is the id of the listed key whose period (valid_from to valid_until) holds the
// receipt time at; it fails the test when none or several do.
func KeyHolding(t testing.TB, set receipts.KeySet, at string) string {
	t.Helper()
	ts, err := time.Parse(time.RFC3339, at)
	if err != nil {
		t.Fatalf("receipt time %q: %v", at, err)
	}
	var ids []string
	for _, k := range set.Keys {
		from, err := time.Parse(time.RFC3339Nano, k.ValidFrom)
		if err != nil {
			t.Fatalf("key %s valid_from %q: %v", k.KeyID, k.ValidFrom, err)
		}
		until := time.Time{}
		if k.ValidUntil != "" {
			if until, err = time.Parse(time.RFC3339Nano, k.ValidUntil); err != nil {
				t.Fatalf("key %s valid_until %q: %v", k.KeyID, k.ValidUntil, err)
			}
		}
		if !ts.Before(from) && (until.IsZero() || ts.Before(until)) {
			ids = append(ids, k.KeyID)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("receipt time %s is in the period of %d keys (%v): %+v", at, len(ids), ids, set.Keys)
	}
	return ids[0]
}

// StrictDocument is the API document (doc, as JSON) with additionalProperties false on every
// object schema that names its properties and does not say otherwise, so that an answer with a
// field the document does not name fails its check.
func StrictDocument(doc []byte) ([]byte, error) {
	var raw map[string]any
	if err := json.Unmarshal(doc, &raw); err != nil {
		return nil, err
	}
	if c, ok := raw["components"].(map[string]any); ok {
		closeObjects(c["schemas"])
	}
	return json.Marshal(raw)
}

func closeObjects(v any) {
	switch v := v.(type) {
	case map[string]any:
		if _, has := v["properties"]; has {
			if _, set := v["additionalProperties"]; !set {
				v["additionalProperties"] = false
			}
		}
		for _, sub := range v {
			closeObjects(sub)
		}
	case []any:
		for _, sub := range v {
			closeObjects(sub)
		}
	}
}
