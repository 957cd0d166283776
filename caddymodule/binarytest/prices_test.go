package binarytest

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// pricedTool is a tool block that prices summarizer at 3 credits.
const pricedTool = `tool summarizer {
			credits 3
		}
`

// TestToolPriceTwoInstances: the built binary, two instances on one PostgreSQL, a 3-credit
// tool and 7 credits: 20 requests spread over both serve exactly 2, and 1 credit is left.
func TestToolPriceTwoInstances(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 3, Piece: "tok ", Delay: 10 * time.Millisecond})
	site := pgSite(url, fs.URL, "\t\t"+pricedTool)
	a := caddyproc.Start(t, site, url)
	b := caddyproc.Start(t, site, url)
	acct := caddyproc.Str(t, a.JSON("account", "create", "--email", "priced@example.com"), "id")
	key := caddyproc.Str(t, b.JSON("key", "create", "--account", acct), "key")
	a.JSON("credits", "grant", "--account", acct, "--credits", "7", "--reference", "priced")

	const attempts = 20
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: attempts}}
	var ok, broke, other atomic.Int64
	var wg sync.WaitGroup
	for i := range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addr := a.HTTP
			if i%2 == 0 {
				addr = b.HTTP
			}
			status, text, h, err := postTo(client, addr, key, genBody("summarizer", "x", "en", ""))
			switch {
			case err == nil && status == 200 && text == "tok tok tok " && h.Get("X-Credits-Used") == "3":
				ok.Add(1)
			case err == nil && status == 402 && strings.Contains(text, `"credits_required":3`):
				broke.Add(1)
			default:
				other.Add(1)
				t.Errorf("%d %q %v", status, text, err)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 2 || broke.Load() != attempts-2 || other.Load() != 0 {
		t.Fatalf("%d served, %d refused, %d other; want 2, %d, 0", ok.Load(), broke.Load(), other.Load(), attempts-2)
	}
	bal := a.JSON("balance", "--account", acct)
	if caddyproc.Num(t, bal, "balance") != 1 || caddyproc.Num(t, bal, "available") != 1 {
		t.Fatalf("balance: %v", bal)
	}
	if v := a.JSON("ledger", "verify"); !caddyproc.Bool(t, v, "ok") {
		t.Fatalf("ledger verify: %v", v)
	}
}
