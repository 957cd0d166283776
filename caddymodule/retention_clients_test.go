package caddymodule

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/ledger"
)

// cutProxy is a TCP relay in front of the in-process Caddy that cuts its first connection a
// few bytes into the response body: the bad mobile network of the issue. Later connections
// pass unchanged.
type cutProxy struct {
	ln    net.Listener
	conns atomic.Int64
	cut   atomic.Bool
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, target string, afterBody int) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			first := p.conns.Add(1) == 1
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { // the client's end ends the upstream connection too
					io.Copy(up, c)
					up.Close()
				}()
				if !first {
					io.Copy(c, up)
					return
				}
				// Pass the headers and afterBody bytes of the body, then cut both sides.
				var seen []byte
				buf := make([]byte, 1)
				for {
					if _, err := up.Read(buf); err != nil {
						return
					}
					seen = append(seen, buf[0])
					if _, err := c.Write(buf); err != nil {
						return
					}
					if i := bytes.Index(seen, []byte("\r\n\r\n")); i >= 0 && len(seen) >= i+4+afterBody {
						p.cut.Store(true)
						return
					}
				}
			}()
		}
	}()
	return p
}

// TestResumeClients runs the README's Python and JavaScript clients (docs/clients) against the
// real Caddy through a network that cuts their first stream: each gets the whole text, charged
// once. The fault server paces the pieces so that the cut falls while the model generates.
func TestResumeClients(t *testing.T) {
	const pieces = 30
	fsrv := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: pieces, Piece: "Heron", Numbered: true, Delay: 15 * time.Millisecond})
	e := newEnv(t, envOptions{ollama: fsrv.URL, extra: "retention_key " + testRetentionKey})
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, cmd, file string }{
		{"python", "python3", "resume.py"},
		{"javascript", "node", "resume.mjs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, err := exec.LookPath(c.cmd)
			if err != nil {
				t.Skipf("%s is not installed", c.cmd)
			}
			src, err := os.ReadFile(filepath.Join("..", "docs", "clients", c.file))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(readme, bytes.TrimSpace(src)) {
				t.Errorf("the README does not show docs/clients/%s as it is", c.file)
			}
			acct, key := e.account(3)
			proxy := newCutProxy(t, "127.0.0.1:"+strings.TrimPrefix(baseURL, "http://127.0.0.1:"), 40)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, path, filepath.Join("..", "docs", "clients", c.file),
				genBody("summarizer", "x", "en", ""), "client-"+c.name)
			cmd.Env = append(os.Environ(), "TEXTGEN_URL=http://"+proxy.ln.Addr().String(), "TEXTGEN_KEY="+key)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v\n%s", c.file, err, stderr.String())
			}
			if !proxy.cut.Load() || proxy.conns.Load() < 2 {
				t.Fatalf("the stream was not cut (cut %v, %d connections)", proxy.cut.Load(), proxy.conns.Load())
			}
			if string(out) != numbered("Heron", pieces) {
				t.Fatalf("%s printed %q", c.file, out)
			}
			waitFor(t, "the charge", func() bool { return e.balance(acct.ID).Balance == 2 })
			if s, h := e.count(acct.ID, ledger.KindSettle), e.count(acct.ID, ledger.KindHold); s != 1 || h != 1 {
				t.Fatalf("%d settles, %d holds: want one generation, charged once", s, h)
			}
		})
	}
}
