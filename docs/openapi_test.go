package docs

import (
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
)

// TestOpenAPIValid checks that openapi.json is a valid OpenAPI 3.1 document (libopenapi-validator
// checks it against the 3.1 meta-schema) whose references all resolve.
func TestOpenAPIValid(t *testing.T) {
	doc, err := libopenapi.NewDocument(OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetSpecInfo().Version; v != "3.1.0" {
		t.Fatalf("openapi is %q, want 3.1.0", v)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("building the model (unresolved references?): %v", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	ok, verrs := v.ValidateDocument()
	for _, e := range verrs {
		t.Errorf("%s: %s", e.Message, e.Reason)
		for _, s := range e.SchemaValidationErrors {
			t.Errorf("  %s: %s", s.KeywordLocation, s.Reason)
		}
	}
	if !ok && len(verrs) == 0 {
		t.Fatal("the document is not valid")
	}
	// The 3.1 meta-schema leaves Schema Objects open (any JSON Schema dialect): compile each one
	// as JSON Schema 2020-12 to catch a misspelt type or keyword.
	sv := schema_validation.NewSchemaValidator()
	check := func(where string, sp *base.SchemaProxy) {
		_, errs := sv.ValidateSchemaString(sp.Schema(), "null")
		for _, e := range errs {
			if e.Message == "schema compilation failed" {
				t.Errorf("%s: %s", where, e.Reason)
			}
		}
	}
	for name, sp := range model.Model.Components.Schemas.FromOldest() {
		check("components.schemas."+name, sp)
	}
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			for status, resp := range op.Responses.Codes.FromOldest() {
				for ct, mt := range resp.Content.FromOldest() {
					if mt.Schema != nil {
						check(method+" "+path+" "+status+" "+ct, mt.Schema)
					}
				}
				for name, h := range resp.Headers.FromOldest() {
					check(method+" "+path+" "+status+" header "+name, h.Schema)
				}
			}
		}
	}
}
