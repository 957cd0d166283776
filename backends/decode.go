package backends

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Reading Ollama's NDJSON stream is the per-piece hot path. encoding/json spent about 1.5 us of
// CPU per line here (reflection, a scan and then a decode pass, field lookups); decodeChunk walks
// the line once, compares keys without allocating, and allocates only the piece's string. It is
// a complete JSON syntax walker for the fields it does not need (it skips them structurally), and
// falls back to encoding/json for strings with escapes or invalid UTF-8, so its results equal
// encoding/json's on every valid line (checked by TestDecodeChunkMatchesEncodingJSON and
// FuzzDecodeChunk).

// maxLine bounds one NDJSON line (as the official client does) so a broken server cannot make
// us buffer without end.
const maxLine = 8 << 20

// readerBuf is the buffer of one stream's line reader. Ollama's lines are a few hundred bytes;
// a longer one is assembled in lineReader.long.
const readerBuf = 4 << 10

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readerBuf) }}

// lineBuffersHeld counts the line readers' buffers taken from readerPool and not given back
// (for tests: a stream that waits for the model holds none).
var lineBuffersHeld atomic.Int64

// dataWaiter is a body that can wait for its next bytes without a buffer of the caller's: a
// chat stream on a connection of our own (leanBody) waits in the connection's read buffer. A
// stream spends most of its life waiting for the model's next piece, so while it waits its
// line reader gives its buffer back to the pool: thousands of open streams then hold a few
// line buffers between them, not one each.
type dataWaiter interface {
	// pending reports whether the body may still bring bytes: false once it ended or failed,
	// which a read reports at once (and the line reader's buffer may hold that outcome).
	pending() bool
	// waitData blocks until bytes are there to read or a read would fail at once.
	waitData()
}

// lineReader splits a response body into lines with a pooled buffer.
type lineReader struct {
	r    io.Reader
	br   *bufio.Reader // nil while waiting for data
	wait dataWaiter    // nil: r cannot wait without a read, so the buffer stays
	long []byte        // a line longer than the buffer, assembled here
}

func newLineReader(r io.Reader) *lineReader {
	l := &lineReader{r: r}
	l.wait, _ = r.(dataWaiter)
	l.take()
	return l
}

func (l *lineReader) take() {
	l.br = readerPool.Get().(*bufio.Reader)
	l.br.Reset(l.r)
	lineBuffersHeld.Add(1)
}

// hasLine reports whether a whole next non-blank line is buffered already, so reading it (next,
// which skips blank lines) will not wait. The blank line that ends every server-sent event
// does not count: the piece before it must be flushed before next waits for the following one.
func (l *lineReader) hasLine() bool {
	b, _ := l.br.Peek(l.br.Buffered())
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return false
		}
		if len(trimSpace(b[:i])) > 0 {
			return true
		}
		b = b[i+1:]
	}
}

func (l *lineReader) release() {
	if l.br == nil {
		return
	}
	l.br.Reset(nil)
	readerPool.Put(l.br)
	l.br = nil
	lineBuffersHeld.Add(-1)
}

// idle waits for the body's next bytes without holding a buffer, when nothing is buffered and
// the body can wait so (dataWaiter). The line returned before is invalid from here on, as
// next's contract says.
func (l *lineReader) idle() {
	if l.wait == nil || l.br.Buffered() > 0 || !l.wait.pending() {
		return
	}
	l.release()
	l.wait.waitData()
	l.take()
}

// next returns the next non-blank line, valid until the following call; io.EOF at a clean end.
func (l *lineReader) next() ([]byte, error) {
	for {
		l.idle()
		line, err := l.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			l.long = append(l.long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = l.br.ReadSlice('\n')
				l.long = append(l.long, line...)
				if len(l.long) > maxLine {
					return nil, fmt.Errorf("line longer than %d bytes", maxLine)
				}
			}
			line = l.long
		}
		if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
			return nil, err
		}
		if len(trimSpace(line)) == 0 {
			if err != nil {
				return nil, err
			}
			continue
		}
		return line, nil
	}
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func clip(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

type scan struct {
	b     []byte
	i     int
	depth int
}

var (
	errSyntax = errors.New("invalid JSON")
	errType   = errors.New("unexpected JSON type")
)

func (s *scan) ws() {
	for s.i < len(s.b) && isSpace(s.b[s.i]) {
		s.i++
	}
}

func (s *scan) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// document walks a whole line that holds one object (or null, which encoding/json reads into
// a struct as nothing) and nothing after it.
func (s *scan) document(member func(key []byte) error) error {
	switch s.peek() {
	case '{':
		if err := s.object(member); err != nil {
			return err
		}
	case 'n':
		if err := s.literal("null"); err != nil {
			return err
		}
	default:
		return errSyntax
	}
	return s.end()
}

func (s *scan) end() error {
	s.ws()
	if s.i != len(s.b) {
		return errors.New("data after the value")
	}
	return nil
}

// objectOrNull walks an object (member as in object) or null (nothing); any other value is
// skipped and a type error, as encoding/json reads it into a struct.
func (s *scan) objectOrNull(member func(key []byte) error) error {
	return s.nullOr('{', func() error { return s.object(member) })
}

// nullOr reads null (nothing) or, when the value starts with open, calls read.
func (s *scan) nullOr(open byte, read func() error) error {
	switch s.peek() {
	case 'n':
		return s.literal("null")
	case open:
		return read()
	default:
		if err := s.skip(); err != nil {
			return err
		}
		return errType
	}
}

// array walks [value, ...] or null; elem reads the value at s.i.
func (s *scan) array(elem func() error) error {
	return s.nullOr('[', func() error {
		defer func() { s.depth-- }()
		if empty, err := s.enter(']'); empty || err != nil {
			return err
		}
		for {
			s.ws()
			if err := elem(); err != nil {
				return err
			}
			if done, err := s.next(']'); done || err != nil {
				return err
			}
		}
	})
}

// object walks {"key": value, ...}; member reads the value at s.i for each key.
func (s *scan) object(member func(key []byte) error) error {
	defer func() { s.depth-- }()
	if empty, err := s.enter('}'); empty || err != nil {
		return err
	}
	for {
		if s.peek() != '"' {
			return errSyntax
		}
		raw, esc, err := s.rawString()
		if err != nil {
			return err
		}
		key := raw
		if esc {
			var k string
			if err := json.Unmarshal(s.b[s.i-len(raw)-2:s.i], &k); err != nil {
				return err
			}
			key = []byte(k)
		}
		if s.peek() != ':' {
			return errSyntax
		}
		s.i++
		s.ws()
		if err := member(key); err != nil {
			return err
		}
		if done, err := s.next('}'); done || err != nil {
			return err
		}
	}
}

// enter steps into the object or array at s.i, whose closing byte is end, one level deeper
// (the caller steps back out with s.depth--); empty reports {} or [], stepped over whole.
func (s *scan) enter(end byte) (empty bool, err error) {
	s.depth++
	if s.depth > maxDepth {
		return false, errors.New("nested too deep")
	}
	s.i++ // '{' or '['
	if s.peek() == end {
		s.i++
		return true, nil
	}
	return false, nil
}

// next steps over the comma after a member or element, or over end; done reports end.
func (s *scan) next(end byte) (done bool, err error) {
	switch s.peek() {
	case ',':
		s.i++
		return false, nil
	case end:
		s.i++
		return true, nil
	}
	return false, errSyntax
}

// rawString reads a string at s.i and returns its bytes between the quotes, and whether it
// has escapes. It does not check the escapes or reject raw control characters; str does for
// the strings it returns, through encoding/json.
func (s *scan) rawString() (raw []byte, esc bool, err error) {
	start := s.i + 1
	for j := start; j <= len(s.b); {
		k := bytes.IndexByte(s.b[j:], '"')
		if k < 0 {
			break
		}
		q := j + k
		bs := 0 // backslashes right before the quote: an odd number escapes it
		for p := q - 1; p >= start && s.b[p] == '\\'; p-- {
			bs++
		}
		if bs%2 == 0 {
			s.i = q + 1
			raw = s.b[start:q]
			return raw, bytes.IndexByte(raw, '\\') >= 0, nil
		}
		j = q + 1
	}
	return nil, false, errors.New("unterminated string")
}

// plain reports a string that needs no decoding: no control characters, valid UTF-8.
func plain(raw []byte) bool {
	for _, c := range raw {
		if c < 0x20 {
			return false
		}
	}
	return utf8.Valid(raw)
}

// str reads a string or null (which, as in encoding/json, leaves old unchanged).
func (s *scan) str(old string) (string, error) {
	switch s.peek() {
	case '"':
		start := s.i
		raw, esc, err := s.rawString()
		if err != nil {
			return "", err
		}
		if !esc && plain(raw) {
			return string(raw), nil
		}
		// Escapes, invalid UTF-8 (replaced by U+FFFD) and control characters (rejected) the
		// way encoding/json does them.
		var v string
		if err := json.Unmarshal(s.b[start:s.i], &v); err != nil {
			return "", err
		}
		return v, nil
	case 'n':
		return old, s.literal("null")
	default:
		if err := s.skip(); err != nil {
			return "", err
		}
		return "", errType
	}
}

func (s *scan) boolean(old bool) (bool, error) {
	switch s.peek() {
	case 't':
		return true, s.literal("true")
	case 'f':
		return false, s.literal("false")
	case 'n':
		return old, s.literal("null")
	default:
		if err := s.skip(); err != nil {
			return false, err
		}
		return false, errType
	}
}

func (s *scan) integer(old int) (int, error) {
	switch c := s.peek(); {
	case c == 'n':
		return old, s.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		start := s.i
		if err := s.number(); err != nil {
			return 0, err
		}
		n, err := strconv.Atoi(string(s.b[start:s.i]))
		if err != nil {
			return 0, errType // a fraction, an exponent or out of range, as encoding/json
		}
		return n, nil
	default:
		if err := s.skip(); err != nil {
			return 0, err
		}
		return 0, errType
	}
}

func (s *scan) literal(lit string) error {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return errSyntax
	}
	s.i += len(lit)
	return nil
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scan) number() error {
	b, i := s.b, s.i
	digits := func() bool {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if !digits() {
		return errSyntax
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return errSyntax
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return errSyntax
		}
	}
	s.i = i
	return nil
}

// skip reads and discards any JSON value.
func (s *scan) skip() error {
	switch c := s.peek(); {
	case c == '"':
		_, _, err := s.rawString()
		return err
	case c == '{':
		return s.object(func([]byte) error { return s.skip() })
	case c == '[':
		s.depth++
		if s.depth > maxDepth {
			return errors.New("nested too deep")
		}
		defer func() { s.depth-- }()
		s.i++
		if s.peek() == ']' {
			s.i++
			return nil
		}
		for {
			if err := s.skip(); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.i++
			case ']':
				s.i++
				return nil
			default:
				return errSyntax
			}
		}
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	default:
		return errSyntax
	}
}
