package binarytest

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/caddy-textgen/textgen/caddymodule/internal/apitest"
	"github.com/caddy-textgen/textgen/docs"
)

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
		strict, err := apitest.StrictDocument(docs.OpenAPI)
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
