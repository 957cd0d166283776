package account

// The accessibility check of the browser test: axe-core run in each page, from
// internal/browsertest, which the console's browser test shares.

import (
	"context"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/internal/browsertest"
)

// checkAccessibility fails the test for each serious or critical axe violation of the page
// now shown; name says which page.
func checkAccessibility(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	browsertest.CheckAccessibility(t, ctx, name)
}
