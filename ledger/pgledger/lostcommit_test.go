package pgledger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// cutProxy is a fake at the connection level, for a fault the real PostgreSQL cannot be made
// to produce on demand: the connection lost after a transaction committed, before its answer
// reached the client. It relays connections to the real server. Once armed, the first
// connection whose client sends marker (the statement's Parse) is the victim: the client's
// next send (the batch that runs the statement) goes through, the server's answer is read up
// to its ReadyForQuery (the implicit transaction has committed by then) and dropped, and the
// client's side is closed.
type cutProxy struct {
	ln     net.Listener
	target string
	marker []byte
	armed  atomic.Bool
}

// newCutProxy starts a proxy to the server of dbURL and returns it with dbURL through it.
func newCutProxy(t *testing.T, dbURL, marker string) (*cutProxy, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: u.Host, marker: []byte(marker)}
	t.Cleanup(func() { ln.Close() })
	go p.serve()
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.relay(c)
	}
}

func (p *cutProxy) relay(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	defer s.Close()
	defer c.Close()
	var state atomic.Int32 // 0 relay, 1 victim (marker seen), 2 cutting (its batch sent)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				switch {
				case state.Load() == 1:
					state.Store(2)
				case state.Load() == 0 && bytes.Contains(buf[:n], p.marker) && p.armed.CompareAndSwap(true, false):
					state.Store(1)
				}
				if _, werr := s.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				s.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	var pending []byte // the answer being dropped, parsed message by message
	for {
		n, err := s.Read(buf)
		if n > 0 && state.Load() != 2 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		} else if n > 0 {
			pending = append(pending, buf[:n]...)
			for len(pending) >= 5 {
				l := int(binary.BigEndian.Uint32(pending[1:5]))
				if len(pending) < 1+l {
					break
				}
				if pending[0] == 'Z' { // ReadyForQuery: committed; the client never hears it
					return
				}
				pending = pending[1+l:]
			}
		}
		if err != nil {
			return
		}
	}
}

// TestPostgresGrantCommitLost: a grant whose connection is lost after its commit, before the
// answer, is answered ErrOutcomeUnknown (not only ErrUnavailable: it was made); a retry with the
// same Reference makes it once.
func TestPostgresGrantCommitLost(t *testing.T) {
	p, dbURL := newCutProxy(t, pgtest.NewDatabase(t), "ledger_grant(")
	s := openPostgres(t, dbURL, faultOptions)
	acct := ledgertest.MustAccount(t, s, "lost@example.com").ID
	req := ledger.GrantRequest{AccountID: acct, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 7, Reference: "grant-lost-commit"}
	p.armed.Store(true)
	_, err := s.Grant(bg, req)
	if !errors.Is(err, ledger.ErrOutcomeUnknown) || !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("grant whose answer was lost after its commit: %v, want ErrOutcomeUnknown (and ErrUnavailable)", err)
	}
	if p.armed.Load() {
		t.Fatal("the proxy cut nothing: the test proves nothing")
	}
	res, err := s.Grant(bg, req)
	if err != nil || !res.Repeated {
		t.Fatalf("retry with the same reference: %+v, %v; want the grant made once, repeated", res, err)
	}
	b, err := s.Balance(bg, acct)
	if err != nil || b.Balance != 7 {
		t.Fatalf("balance %+v, %v; want 7", b, err)
	}
}
