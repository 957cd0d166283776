package caddymodule

// Charging at the edges of a stream: a reader that stops reading, a client that leaves before
// any text reached it, and a model that ends without a single piece. Each is charged exactly by
// the charging rule (docs/API.md, "Charging"): only text that reached the client's connection is charged.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/ledger"
)

// stalledReader sends a generate request over a connection with a tiny receive buffer, reads
// the status line and headers, and then reads nothing more: its socket fills up and the
// server's writes block. It returns the status and a func that closes the connection.
func stalledReader(t *testing.T, key, body string) (int, func()) {
	t.Helper()
	return stalledReaderSegments(t, key, body, 0)
}

// stalledReaderSegments is stalledReader with segments of at most mss bytes (0: the loopback's
// own, about 64 KiB): Linux sizes the server's send buffer by its peer's segments, so with
// 536-byte ones the server's socket takes about 90 KB of a reader that never reads, instead of
// about 2.8 MB.
func stalledReaderSegments(t *testing.T, key, body string, mss int) (int, func()) {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			if serr == nil && mss > 0 {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, mss)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(baseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /api/v1/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 512), nil)
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	return resp.StatusCode, func() { conn.Close() }
}

// TestStalledReaderTimesOut: clients that stop reading a long answer lose their response after
// write_timeout instead of keeping, until generation_timeout (here 10 minutes), the model's place
// (max_in_flight 1), their account's place (max_concurrent_per_account 1) and their hold. The
// text they were sent is charged once; the other account is served meanwhile.
func TestStalledReaderTimesOut(t *testing.T) {
	e, slow, slowKey, other := stalledGeneration(t, "max_concurrent_per_account 1\n\t\tretention off")
	// The stalled account's place is free: its next request is served at once.
	resp, err := e.post(context.Background(), slowKey, genBody("email-writer", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the stalled account's next request: %d, want 200 (its place must be free)", resp.StatusCode)
	}
	if b := e.balance(slow.ID); b.Balance != 3 || b.Available != 3 {
		t.Errorf("stalled account %+v, want 3 (its stalled text charged once, the next request once)", b)
	}
	if b := e.balance(other.ID); b.Balance != 4 {
		t.Errorf("other account %+v", b)
	}
	if settles := e.count(slow.ID, ledger.KindSettle); settles != 2 {
		t.Errorf("%d settles on the stalled account, want 2", settles)
	}
	e.verify()
}

// stalledGeneration starts a generation of 40 MB of text (more than the sockets of both sides
// can buffer on loopback) for a client that never reads, on a handler with one model place and
// extra settings, and checks that the write deadline ends it: its hold is settled (text went
// out), and the model's only place is free for another account. It returns the env, the stalled
// account and its key, and the other account.
func stalledGeneration(t *testing.T, extra string) (e *env, slow ledger.Account, slowKey string, other ledger.Account) {
	t.Helper()
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 40_000, Piece: strings.Repeat("x", 1024)})
	fs.Set(ollamatest.FaultConfig{Model: "short", Pieces: 3, Piece: "tok "})
	// Caddy's own write_idle timeout (1 minute by default) is switched off, so that only the
	// handler's write_timeout can end the stalled response.
	e = newEnv(t, envOptions{ollama: fs.URL, limits: "default", global: "servers {\n\t\ttimeouts {\n\t\t\twrite_idle -1s\n\t\t}\n\t}", extra: `write_timeout 1s
		generation_timeout 10m
		hold_ttl 20m
		max_in_flight 1
		queue_size 8
		queue_timeout 2m
		rate_limit key off
		rate_limit account off
		tool email-writer {
			model short
		}
		` + extra})
	slow, slowKey = e.account(5)
	other, otherKey := e.account(5)

	status, closeConn := stalledReader(t, slowKey, genBody("summarizer", "x", "en", ""))
	t.Cleanup(closeConn)
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	// The stalled generation ends when its write times out, and its hold is settled: text went
	// out. (Without the write deadline it would run for generation_timeout, 10 minutes.)
	waitFor(t, "the stalled generation's hold to be settled", func() bool { return e.balance(slow.ID).Balance == 4 })
	// The model's only place is free: the other account is served.
	resp, err := e.post(context.Background(), otherKey, genBody("email-writer", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(text) != "tok tok tok " {
		t.Fatalf("the other account: %d %q, want 200 and its text", resp.StatusCode, text)
	}
	return e, slow, slowKey, other
}

// TestLeftBeforeFirstPiece: a client whose credit was reserved but who left before any text
// reached it is charged nothing: the model stalls before its first piece, the client gives up.
func TestLeftBeforeFirstPiece(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Mode: ollamatest.FaultStall})
	e := newEnv(t, envOptions{ollama: fs.URL})
	acct, key := e.account(2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		resp, err := e.post(ctx, key, genBody("summarizer", "x", "en", ""))
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitFor(t, "the credit to be reserved", func() bool { return e.balance(acct.ID).Available == 1 })
	waitFor(t, "the model server to get the request", func() bool { return fs.InFlight() == 1 })
	cancel()
	<-done
	waitFor(t, "the hold to be voided", func() bool { return e.balance(acct.ID).Available == 2 })
	if b := e.balance(acct.ID); b.Balance != 2 {
		t.Errorf("balance %+v: a client that got no text was charged", b)
	}
	e.verify()
}

// TestFirstPieceWriteFails: a piece whose write fails did not reach the client, so a client
// whose very first piece could not be written is charged nothing. The first piece is 7 MB, more
// than both sides' socket buffers hold on loopback; the client reads the headers and then
// nothing, so the write runs into write_timeout and fails while the request is still alive.
func TestFirstPieceWriteFails(t *testing.T) {
	// The kernel's largest send buffer (tcp_wmem's third field; 4 MB by default) must be well
	// below the piece, or the piece fits into it and counts as delivered.
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 3 {
			if max, _ := strconv.Atoi(f[2]); max > 6<<20 {
				t.Fatalf("net.ipv4.tcp_wmem allows %d-byte send buffers: the 7 MB piece of this test would fit; the test needs a machine with the default (4 MB)", max)
			}
		}
	}
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 2, Piece: strings.Repeat("y", 7<<20)})
	e := newEnv(t, envOptions{ollama: fs.URL, global: "servers {\n\t\ttimeouts {\n\t\t\twrite_idle -1s\n\t\t}\n\t}",
		extra: "write_timeout 1s"})
	acct, key := e.account(2)
	status, closeConn := stalledReader(t, key, genBody("summarizer", "x", "en", ""))
	defer closeConn()
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	waitFor(t, "the hold to be resolved", func() bool { return e.balance(acct.ID).Available == 2 || e.balance(acct.ID).Balance < 2 })
	if b := e.balance(acct.ID); b.Balance != 2 || b.Available != 2 {
		t.Errorf("balance %+v: a client whose first write failed was charged", b)
	}
	e.verify()
}

// TestZeroPieceGeneration: a model that finishes without a single piece of text is answered
// 502 and charged nothing.
func TestZeroPieceGeneration(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 0})
	e := newEnv(t, envOptions{ollama: fs.URL})
	acct, key := e.account(2)
	resp, err := e.post(context.Background(), key, genBody("summarizer", "x", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	b := decodeErr(t, resp)
	if resp.StatusCode != http.StatusBadGateway || b.Error.Code != "backend_error" || resp.Header.Get("X-Credits-Used") != "0" {
		t.Fatalf("%d %s %v, want 502 backend_error", resp.StatusCode, b.Error.Code, resp.Header)
	}
	if bal := e.balance(acct.ID); bal.Balance != 2 || bal.Available != 2 {
		t.Errorf("balance %+v after an empty generation", bal)
	}
	if voids := e.count(acct.ID, ledger.KindVoid); voids != 1 {
		t.Errorf("%d voids, want 1", voids)
	}
	e.verify()
}
