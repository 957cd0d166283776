package caddymodule

import (
	"net/http"
	"testing"

	"github.com/caddy-textgen/textgen/caddymodule/catalog"
)

// TestTracingOffAllocatesNothing: without Caddy's tracing (no recording span in the request's
// context) the steps of a request cost a nil check each, and allocate nothing.
func TestTracingOffAllocatesNothing(t *testing.T) {
	r, err := http.NewRequest(http.MethodPost, "/api/v1/generate", nil)
	if err != nil {
		t.Fatal(err)
	}
	g := &generation{r: r, ask: ask{tool: &toolRuntime{Tool: &catalog.Tool{Slug: "summarizer"}}}}
	allocs := testing.AllocsPerRun(100, func() {
		g.trace = startTrace(r)
		t0 := g.trace.now()
		g.trace.step(spanKeyCheck, t0, g)
		g.trace.stepAt(spanFirstPiece, t0, t0, g)
		g.trace.finish(g)
	})
	if allocs != 0 || g.trace.on() {
		t.Fatalf("tracing off: %v allocations a request (on: %v), want 0", allocs, g.trace.on())
	}
}
