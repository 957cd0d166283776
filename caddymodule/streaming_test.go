package caddymodule

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
)

// deadlineRecorder is a response writer that records the write deadlines set through its
// http.ResponseController.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	set []time.Time
}

func (r *deadlineRecorder) SetWriteDeadline(d time.Time) error {
	r.set = append(r.set, d)
	return nil
}

// A piece's write deadline is WriteTimeout from now, never later than the generation's end; one
// armed less than a tenth of WriteTimeout earlier is kept rather than set again for every piece,
// and one later than wanted is never kept. (That a stalled client is cut by it, on a real
// connection: TestStalledReaderTimesOut.)
func TestWriteDeadlineArmedOnce(t *testing.T) {
	const timeout = time.Minute
	rec := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
	s := &streamer{rc: http.NewResponseController(rec), timeout: timeout}

	s.deadline(time.Time{})
	s.deadline(time.Time{})
	s.deadline(time.Time{})
	if len(rec.set) != 1 {
		t.Fatalf("%d deadlines set for three writes within a tenth of the timeout, want 1", len(rec.set))
	}
	if d := time.Until(rec.set[0]); d <= timeout*9/10 || d > timeout {
		t.Errorf("deadline %v from now, want within WriteTimeout %v", d, timeout)
	}

	end := time.Now().Add(timeout / 2) // the generation ends sooner: the deadline tightens
	s.deadline(end)
	if len(rec.set) != 2 || !rec.set[1].Equal(end) {
		t.Fatalf("deadlines %v, want the generation's end %v last", rec.set, end)
	}
	s.deadline(end)
	if len(rec.set) != 2 {
		t.Errorf("the same end set again: %v", rec.set)
	}

	// Armed more than a tenth of WriteTimeout earlier: set anew.
	s.armed = time.Now().Add(timeout * 8 / 10)
	s.deadline(time.Time{})
	if len(rec.set) != 3 || time.Until(rec.set[2]) <= timeout*9/10 {
		t.Errorf("deadlines %v, want a new one WriteTimeout from now", rec.set)
	}

	s.started = true
	s.close()
	s.deadline(time.Time{})
	if n := len(rec.set); n != 5 || !rec.set[3].IsZero() {
		t.Errorf("deadlines %v, want the cleared one, then a new one", rec.set)
	}
}

// rawChunks sends a generate request on a connection of its own and returns the body's
// HTTP/1.1 chunks as the server wrote them: one a flush.
func rawChunks(t *testing.T, key, body string) []string {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(baseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /api/v1/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		key, len(body), body)
	br := bufio.NewReader(conn)
	for { // the status line and headers
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\r\n" {
			break
		}
		if strings.HasPrefix(line, "HTTP/1.1 ") && !strings.HasPrefix(line, "HTTP/1.1 200 ") {
			t.Fatalf("status %q", line)
		}
	}
	var chunks []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d chunks: %v", len(chunks), err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
		if err != nil {
			t.Fatalf("chunk size %q: %v", line, err)
		}
		if n == 0 {
			return chunks
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(br, b); err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, string(b[:n]))
	}
}

// The first flush carries the pieces the model had ready with the first, up to
// firstFlushBytes: a short answer that came at once goes out in one write, not the first piece
// and then the rest. A first piece larger than the bound goes alone, so a client that does not
// read cannot hold up the flush that decides its charge; the rest follows in one write.
func TestFirstFlushCarriesReadyPieces(t *testing.T) {
	fs := ollamatest.NewFaultServerT(t, ollamatest.FaultConfig{Pieces: 8, Piece: "p", Numbered: true})
	big := strings.Repeat("b", firstFlushBytes+1)
	fs.Set(ollamatest.FaultConfig{Model: "big", Pieces: 3, Piece: big})
	e := newEnv(t, envOptions{ollama: fs.URL, extra: "tool summarizer {\n\t\t\tmodel big\n\t\t}"})
	_, key := e.account(10)

	chunks := rawChunks(t, key, genBody("email-writer", "x", "en", ""))
	if want := "p0 p1 p2 p3 p4 p5 p6 p7 "; len(chunks) != 1 || chunks[0] != want {
		t.Fatalf("an answer of 8 pieces that came at once was written as %d chunks %q; want one, %q", len(chunks), chunks, want)
	}
	chunks = rawChunks(t, key, genBody("summarizer", "x", "en", ""))
	// (net/http writes what passes its 2 KiB buffer in chunks of its own: the rest may be two.)
	if len(chunks) < 2 || chunks[0] != big || strings.Join(chunks[1:], "") != big+big {
		t.Fatalf("three pieces of %d bytes came as %d chunks of %v bytes; want the first alone, then the other two", len(big), len(chunks), chunkSizes(chunks))
	}
}

func chunkSizes(chunks []string) []int {
	n := make([]int, len(chunks))
	for i, c := range chunks {
		n[i] = len(c)
	}
	return n
}

// flushRecorder is a response writer that counts its flushes and says which goroutine made
// them (through the goroutine's stack: the test's own or another).
type flushRecorder struct {
	*httptest.ResponseRecorder
	mu        sync.Mutex
	flushes   int
	elsewhere int // flushes made by another goroutine than the test's
	test      string
}

func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	return strings.Fields(string(b))[1]
}

func (r *flushRecorder) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ResponseRecorder.Flush()
	r.flushes++
	if goroutineID() != r.test {
		r.elsewhere++
	}
}

// The first text of an HTTP/1 stream, when it fits the first flush, is written and flushed by
// flush itself (kick), on the model's goroutine: when flush returns it is with the client, and no writer
// goroutine was started for it. The text after it goes to the writer, so that the model does not
// wait for a client that has stopped reading; on HTTP/2, whose writes wait for a flow-control
// window the client sets, so does the first.
func TestFirstTextWrittenInline(t *testing.T) {
	for _, proto := range []int{1, 2} {
		rec := &flushRecorder{ResponseRecorder: httptest.NewRecorder(), test: goroutineID()}
		r := httptest.NewRequest(http.MethodPost, "/api/v1/generate", nil)
		r.ProtoMajor = proto
		s := newStreamer(rec, r, plainEncoder{}, false, "req_1", 9, time.Minute, time.Now().Add(time.Minute), nil)
		for _, p := range []string{"one ", "two "} {
			if err := s.emit(p); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.flush(); err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		body, flushes, elsewhere := rec.Body.String(), rec.flushes, rec.elsewhere
		rec.mu.Unlock()
		if proto == 1 && (body != "one two " || flushes != 1 || elsewhere != 0) {
			t.Fatalf("HTTP/1: after the first flush the client has %q in %d flushes (%d by another goroutine); want %q in one, by flush itself", body, flushes, elsewhere, "one two ")
		}
		if err := s.emit("three"); err != nil {
			t.Fatal(err)
		}
		if err := s.flush(); err != nil {
			t.Fatal(err)
		}
		if err := s.drain(); err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		body, flushes, elsewhere = rec.Body.String(), rec.flushes, rec.elsewhere
		rec.mu.Unlock()
		want := flushes - 1 // all but the first: by the writer
		if proto == 2 {
			want = flushes // the first as well
		}
		if body != "one two three" || elsewhere != want || elsewhere == 0 {
			t.Fatalf("HTTP/%d: the client has %q, %d of %d flushes by another goroutine; want %q and %d", proto, body, elsewhere, flushes, "one two three", want)
		}
	}
}
