package caddymodule

import (
	"net/http"

	"github.com/caddy-textgen/textgen/docs"
)

const openAPIPath = "/api/v1/openapi.json"

// serveOpenAPI answers GET /api/v1/openapi.json with the API's OpenAPI document
// (docs/openapi.json, embedded at build time; free, no key needed).
func serveOpenAPI(w http.ResponseWriter, r *http.Request, reqID string) {
	serveStatic(w, r, reqID, docs.OpenAPI)
}
