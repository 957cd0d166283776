package binarytest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/caddy-textgen/textgen/docs"
)

// apiErrBody is the JSON error every refusal of the API answers.
type apiErrBody struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		RequestID string `json:"request_id"`
	} `json:"error"`
}

// decodeErr reads resp's body as the API's JSON error and closes it.
func decodeErr(t *testing.T, resp *http.Response) apiErrBody {
	t.Helper()
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var b apiErrBody
	if err := json.Unmarshal(data, &b); err != nil {
		t.Fatalf("error body is not JSON: %q", data)
	}
	return b
}

// apiDocument is the API document (docs/openapi.json) as a validator, with every object schema
// closed (no property it does not name), built once per test binary.
var apiDocument struct {
	once sync.Once
	v    validator.Validator
	err  error
}

// documented checks an answer of the built binary against the API document, as caddymodule's
// conformance test does for the in-process server: the answers only a process of its own can
// provoke (a full disk) are checked here. It leaves resp's body readable again.
func documented(t *testing.T, req *http.Request, resp *http.Response) {
	t.Helper()
	apiDocument.once.Do(func() {
		var raw map[string]any
		if apiDocument.err = json.Unmarshal(docs.OpenAPI, &raw); apiDocument.err != nil {
			return
		}
		closeObjects(raw["components"].(map[string]any)["schemas"])
		strict, err := json.Marshal(raw)
		if err != nil {
			apiDocument.err = err
			return
		}
		doc, err := libopenapi.NewDocument(strict)
		if err != nil {
			apiDocument.err = err
			return
		}
		v, errs := validator.NewValidator(doc)
		if len(errs) > 0 {
			apiDocument.err = errs[0]
			return
		}
		apiDocument.v = v
	})
	if apiDocument.err != nil {
		t.Fatalf("the API document: %v", apiDocument.err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", req.Method, req.URL.Path, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if ok, errs := apiDocument.v.ValidateHttpResponse(req, resp); !ok {
		for _, e := range errs {
			t.Errorf("%s %s -> %d: %s: %s", req.Method, req.URL.Path, resp.StatusCode, e.Message, e.Reason)
		}
		t.Errorf("the answer was %v %s", resp.Header, body)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
}

// closeObjects sets additionalProperties false on every object schema that names its
// properties and does not say otherwise, so that an answer with a field the document does not
// name fails.
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
