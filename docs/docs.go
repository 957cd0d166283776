// Package docs holds the API's own reference documents, for the server to serve as they are
// written: openapi.json (the OpenAPI 3.1 description of the public API, served at
// GET /api/v1/openapi.json). docs/API.md states the rules around it.
package docs

import _ "embed"

// OpenAPI is docs/openapi.json, the OpenAPI 3.1 document of the API.
//
//go:embed openapi.json
var OpenAPI []byte
