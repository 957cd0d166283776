package caddymodule

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/ledger"
)

// TestClientGoneBeforeTextNotCharged: clients on real TCP sockets hang up at random moments of
// a paced 6-piece answer, each after draining what its receive buffer holds; the ledger charges
// exactly those that read text, once each: a client that closed its side before any text went
// out (a flush into the kernel's buffer after its FIN still succeeds) received nothing and is
// not charged. Run with retention off and on (a delivered generation then runs on). The model
// server is the fault server (a fake Ollama), for its controlled pace.
func TestClientGoneBeforeTextNotCharged(t *testing.T) {
	const pieces, pace = 6, 40 * time.Millisecond
	fsrv := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: pieces, Piece: "Heron", Numbered: true, Delay: pace})
	for _, retention := range []bool{false, true} {
		t.Run(fmt.Sprintf("retention=%v", retention), func(t *testing.T) {
			extra := ""
			if retention {
				extra = "retention_key " + testRetentionKey
			}
			e := newEnv(t, envOptions{ollama: fsrv.URL, extra: extra})
			const clients = 40
			type result struct {
				acct string
				read []byte
				err  error
			}
			results := make([]result, clients)
			var wg sync.WaitGroup
			for i := range results {
				acct, key := e.account(2)
				results[i].acct = acct.ID
				// Most clients leave around the first piece (about one pace after the request),
				// where a departure and the first flush meet; the rest anywhere in the answer.
				leave := time.Duration(rand.Int64N(int64(3 * pace)))
				if i%4 == 3 {
					leave = time.Duration(rand.Int64N(int64((pieces + 2) * pace)))
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i].read, results[i].err = hangUpClient(key, genBody("summarizer", "x", "en", ""), leave)
				}()
			}
			wg.Wait()
			readers := 0
			for i, r := range results {
				if r.err != nil {
					t.Fatalf("client %d: %v", i, r.err)
				}
				waitFor(t, "the hold's settle or void", func() bool {
					return e.count(r.acct, ledger.KindSettle)+e.count(r.acct, ledger.KindVoid) == 1
				})
				text := readText(r.read)
				charged := e.count(r.acct, ledger.KindSettle)
				if text {
					readers++
				}
				if text && charged != 1 || !text && charged != 0 {
					t.Errorf("client %d read %q and was charged %d times", i, r.read, charged)
				}
				if b := e.balance(r.acct); b.Balance != 2-int64(charged) || b.Available != b.Balance {
					t.Errorf("client %d: balance %+v after %d charges", i, b, charged)
				}
			}
			t.Logf("%d of %d clients read text before they left", readers, clients)
			e.verify()
		})
	}
}

// hangUpClient sends a generate request with key on a new connection, and after leave reads
// what its receive buffer holds (without waiting for more) and closes the connection. It
// returns what it read.
func hangUpClient(key, body string, leave time.Duration) ([]byte, error) {
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", httpPort))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	req := fmt.Sprintf("POST /api/v1/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body)
	if _, err := c.Write([]byte(req)); err != nil {
		return nil, err
	}
	time.Sleep(leave)
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return nil, err
	}
	var got []byte
	var rerr error
	buf := make([]byte, 64<<10)
	if err := raw.Control(func(fd uintptr) {
		for { // the socket is non-blocking: read until nothing is left
			n, err := syscall.Read(int(fd), buf)
			if n > 0 {
				got = append(got, buf[:n]...)
			}
			if err == syscall.EINTR {
				continue
			}
			if err != nil || n <= 0 {
				if err != nil && err != syscall.EAGAIN {
					rerr = err
				}
				return
			}
		}
	}); err != nil {
		return nil, err
	}
	if rerr != nil && rerr != syscall.ECONNRESET {
		return got, rerr
	}
	return got, nil
}

// readText reports whether an HTTP/1.1 response read in part holds a byte of the body: the 200
// headers go out with the first piece of text.
func readText(resp []byte) bool {
	i := bytes.Index(resp, []byte("\r\n\r\n"))
	return bytes.HasPrefix(resp, []byte("HTTP/1.1 200 ")) && i >= 0 && len(resp) > i+4
}
