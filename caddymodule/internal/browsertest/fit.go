package browsertest

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"
)

// Widths are the screen widths every page of My Account and the console is checked at: a
// phone and a desktop, the desktop last (the tests go on at its width).
var Widths = []struct {
	Name     string
	Viewport chromedp.Action[chromedp.Void]
}{
	{"phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile)},
	{"desktop", chromedp.EmulateViewport(1280, 900)},
}

// fitScript lists what does not fit the current page's width: the page itself when it scrolls
// sideways, and each link, button or field (a table's actions among them) that lies outside
// the screen or outside a box that clips it (a table scrolled sideways in its wrapper hides
// the actions at its end).
const fitScript = `(() => {
	const bad = [];
	const w = document.documentElement.scrollWidth;
	if (w > innerWidth) bad.push("the page is " + w + " px wide on a " + innerWidth + " px screen");
	for (const e of document.querySelectorAll("a, button, input:not([type=hidden]), select, textarea")) {
		const r = e.getBoundingClientRect();
		if (r.width <= 1 || r.height <= 1 || e.closest(".sr-only, .skip")) continue; // not shown
		let left = 0, right = innerWidth;
		for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
			if (getComputedStyle(p).overflowX !== "visible") {
				const pr = p.getBoundingClientRect();
				left = Math.max(left, pr.left);
				right = Math.min(right, pr.right);
			}
		}
		if (r.left < left - 0.5 || r.right > right + 0.5) {
			bad.push(e.tagName.toLowerCase() + " \"" + (e.textContent || e.value || e.name || "").trim().slice(0, 40) + "\" at " +
				Math.round(r.left) + "-" + Math.round(r.right) + " px, in view " + Math.round(left) + "-" + Math.round(right));
		}
	}
	return bad;
})()`

// CheckFits fails the test when the current page does not fit its screen's width (fitScript).
func CheckFits(t testing.TB, ctx context.Context, page, width string) {
	t.Helper()
	bad, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](fitScript))
	if err != nil {
		t.Fatalf("checking that %s fits the %s screen: %v", page, width, err)
	}
	for _, b := range bad {
		t.Errorf("%s on a %s screen: %s", page, width, b)
	}
}
