package browsertest

// The accessibility check of the browser tests: axe-core (Deque's rule engine, from npm) is
// injected into each page through the DevTools protocol and run there; a violation of impact
// "serious" or "critical" fails the test. The console's browser test uses it; My Account's has
// the same check in its own package (caddymodule/account/axe_test.go).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/caddy-textgen/textgen/backends/ollamatest/gobin"
)

// AxeVersion is the pinned axe-core; .ci/run installs the same.
const AxeVersion = "4.14.1"

var (
	axeOnce   sync.Once
	axeSource string
	axeErr    error
)

// axeScript returns axe.min.js of the pinned axe-core from <cache>/axe-core-<version>/,
// installing it there with npm first when it is missing ($TEXTGEN_AXE_JS names a file to use
// instead).
func axeScript(t testing.TB) string {
	t.Helper()
	axeOnce.Do(func() {
		path := os.Getenv("TEXTGEN_AXE_JS")
		if path == "" {
			path, axeErr = ensureAxe()
		}
		if axeErr == nil {
			var b []byte
			b, axeErr = os.ReadFile(path)
			axeSource = string(b)
		}
	})
	if axeErr != nil {
		t.Fatalf("axe-core %s: %v", AxeVersion, axeErr)
	}
	return axeSource
}

// ensureAxe installs axe-core into a temporary folder beside its cache folder and renames it
// into place, so that test processes running at once never see half an install.
func ensureAxe() (string, error) {
	cache, err := gobin.CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "axe-core-"+AxeVersion)
	js := filepath.Join(dir, "node_modules", "axe-core", "axe.min.js")
	if _, err := os.Stat(js); err == nil {
		return js, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(cache, "axe-core-install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("npm", "install", "--prefix", tmp, "--no-save", "--no-audit", "--no-fund", "--loglevel=error", "axe-core@"+AxeVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm install axe-core@%s (needs Node's npm and the npm registry): %v\n%s", AxeVersion, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(js); statErr != nil { // not another process's install
			return "", err
		}
	}
	return js, nil
}

// axeRun runs axe on the whole page for WCAG 2.x A and AA and best practices, and returns the
// violations of impact serious or critical, one line each.
const axeRun = `axe.run(document, {runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]}})
	.then(r => r.violations.filter(v => v.impact === "serious" || v.impact === "critical")
		.map(v => v.impact + " " + v.id + ": " + v.help + " at " + v.nodes.map(n => n.target.join(" ")).slice(0, 5).join(", ")))`

// CheckAccessibility fails the test for each serious or critical axe violation of the page now
// shown; name says which page.
func CheckAccessibility(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	src := axeScript(t)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](src+"\n;void 0")); err != nil {
		t.Fatalf("%s: injecting axe-core: %v", name, err)
	}
	found, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](axeRun, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: running axe-core: %v", name, err)
	}
	if len(found) > 0 {
		t.Errorf("%s: accessibility violations (axe-core %s):\n  %s", name, AxeVersion, strings.Join(found, "\n  "))
	}
}
