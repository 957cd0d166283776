package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/ledger"
)

// Tools with a price (a tool block's credits): what a request holds and a complete answer
// charges, stated by the catalog, the headers, the done event and the 402.

const pricedTool = `tool summarizer {
			credits 3
		}
`

// TestToolPriceRaceAndHeaders: a 3-credit tool racing on 7 credits: exactly 2 are served and
// charged 3 each, the others get 402 with the price and cost nothing, 1 credit is left; the
// catalog states each tool's price, and a 1-credit tool still serves the credit left.
func TestToolPriceRaceAndHeaders(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "tok ", Delay: 20 * time.Millisecond})
	e := newEnv(t, envOptions{ollama: fs.URL, extra: pricedTool})
	acct, key := e.account(7)

	const attempts = 10
	var ok, broke atomic.Int64
	var mu sync.Mutex
	var fails []string
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := e.post(context.Background(), key, genBody("summarizer", "x", "en", ""))
			if err != nil {
				t.Error(err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == 200 && string(body) == "tok tok tok " && resp.Header.Get("X-Credits-Used") == "3":
				ok.Add(1)
			case resp.StatusCode == 402 && resp.Header.Get("X-Credits-Used") == "0":
				var b struct {
					Error struct {
						Code            string `json:"code"`
						Message         string `json:"message"`
						CreditsRequired int64  `json:"credits_required"`
					} `json:"error"`
				}
				if err := json.Unmarshal(body, &b); err != nil || b.Error.Code != "insufficient_credits" || b.Error.CreditsRequired != 3 {
					mu.Lock()
					fails = append(fails, fmt.Sprintf("402 body %s", body))
					mu.Unlock()
				}
				broke.Add(1)
			default:
				mu.Lock()
				fails = append(fails, fmt.Sprintf("%d %v %q", resp.StatusCode, resp.Header, body))
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(fails) > 0 {
		t.Fatalf("unexpected answers: %v", fails)
	}
	if ok.Load() != 2 || broke.Load() != attempts-2 {
		t.Fatalf("%d served, %d refused; want 2 and %d", ok.Load(), broke.Load(), attempts-2)
	}
	if b := e.balance(acct.ID); b.Balance != 1 || b.Available != 1 {
		t.Fatalf("balance %+v, want 1 left", b)
	}

	// The 402 says what the tool costs against what is there.
	resp, err := e.post(context.Background(), key, genBody("summarizer", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	if b := decodeErr(t, resp); resp.StatusCode != 402 || !strings.Contains(b.Error.Message, "summarizer costs 3 credits and 1 are available") {
		t.Fatalf("402: %d %+v", resp.StatusCode, b)
	}
	// A tool of the default price still serves the last credit, and says so.
	resp, err = e.post(context.Background(), key, genBody("keyword-generator", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Credits-Used") != "1" || resp.Header.Get("X-Credits-Remaining") != "0" {
		t.Fatalf("1-credit tool: %d %v", resp.StatusCode, resp.Header)
	}
	// The event stream's done event reports the price too.
	e.grant(acct.ID, ledger.Live, 3)
	resp, err = e.post(context.Background(), key, genBody("summarizer", "x", "en", ""), "Accept", "text/event-stream")
	if err != nil {
		t.Fatal(err)
	}
	events, err := readSSE(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1]
	if last.name != "done" || !strings.Contains(last.data, `"credits_used":3`) || !strings.Contains(last.data, `"credits_remaining":0`) {
		t.Fatalf("done event: %+v", last)
	}
	// Receipts and the ledger's entries say 3.
	settles := 0
	for _, en := range e.entries(acct.ID) {
		if en.Kind == ledger.KindSettle {
			settles++
			if en.Amount != -3 && !(en.Tool == "keyword-generator" && en.Amount == -1) {
				t.Fatalf("settle entry %+v", en)
			}
		}
	}
	if settles != 4 {
		t.Fatalf("%d settles, want 4", settles)
	}

	// The catalog states each tool's price.
	cresp, text := e.getText("", "/api/v1/tools")
	var doc struct {
		Tools []struct {
			Slug    string `json:"slug"`
			Credits int64  `json:"credits"`
		} `json:"tools"`
	}
	if err := json.Unmarshal([]byte(text), &doc); cresp.StatusCode != 200 || err != nil || len(doc.Tools) == 0 {
		t.Fatalf("catalog: %d %v %s", cresp.StatusCode, err, text)
	}
	for _, tl := range doc.Tools {
		want := int64(1)
		if tl.Slug == "summarizer" {
			want = 3
		}
		if tl.Credits != want {
			t.Fatalf("catalog: %s costs %d, want %d", tl.Slug, tl.Credits, want)
		}
	}
	e.verify()
}

// TestToolPriceHeldAcrossReload: the price charged is the one in force when the credit was
// held: a reload that raises the tool's price during a generation charges the generation the
// price it held, and the next request the new one.
func TestToolPriceHeldAcrossReload(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 20, Piece: "tok ", Delay: 50 * time.Millisecond})
	o := envOptions{ollama: fs.URL, extra: pricedTool}
	e := newEnv(t, o)
	acct, key := e.account(20)
	resp, err := e.post(context.Background(), key, genBody("summarizer", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("X-Credits-Used") != "3" {
		t.Fatalf("first: %d %v", resp.StatusCode, resp.Header)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(resp.Body, buf); err != nil { // the generation runs
		t.Fatal(err)
	}
	o.extra = strings.Replace(pricedTool, "credits 3", "credits 5", 1)
	loadConfig(t, caddyfileFor(o, e.dir))
	rest, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || len(rest)+4 != 20*len("tok ") {
		t.Fatalf("the generation across the reload: %d bytes, %v", len(rest)+4, err)
	}
	waitFor(t, "the first generation's settle", func() bool { return e.count(acct.ID, ledger.KindSettle) == 1 })
	if b := e.balance(acct.ID); b.Balance != 17 {
		t.Fatalf("balance after a generation held at 3 and ended after a reload to 5: %+v", b)
	}
	// The first request's connection belongs to the server the reload replaced, which closes
	// it: the next request opens one of its own rather than race that close.
	e.client.CloseIdleConnections()
	resp, err = e.post(context.Background(), key, genBody("summarizer", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Credits-Used") != "5" || resp.Header.Get("X-Credits-Remaining") != "12" {
		t.Fatalf("after the reload: %d %v", resp.StatusCode, resp.Header)
	}
	e.verify()
}
