// Package browsertest starts a real headless Chromium for the browser tests (chromedp): My
// Account's pages and the JavaScript client of docs/clients.
package browsertest

import (
	"context"
	"github.com/caddy-textgen/textgen/internal/tier"
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"
)

// Install is the command that installs the browser on Debian (CI runs it in .ci/run).
const Install = "apt-get update && apt-get install -y chromium"

// Path finds the browser: $TEXTGEN_CHROMIUM, else chromium on the PATH. It never skips: a
// machine without it fails the test, saying how to install it.
func Path(t testing.TB) string {
	t.Helper()
	tier.Full(t, "Chromium")
	if p := os.Getenv("TEXTGEN_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("Chromium is not installed; install it with: %s (or set TEXTGEN_CHROMIUM to its path)", Install)
	return ""
}

// Start starts a headless Chromium with a fresh profile and returns its context; it is stopped
// when the test ends.
func Start(t testing.TB) context.Context {
	t.Helper()
	chromium := Path(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser, without a timeout on it
		t.Fatalf("starting Chromium (%s): %v", chromium, err)
	}
	return ctx
}
