package backends

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// DefaultOllamaHost is the Ollama server used when neither the config nor $OLLAMA_HOST names one.
const DefaultOllamaHost = "http://127.0.0.1:11434"

// ChatConfig configures a Chat backend. Zero values take the defaults stated per field.
type ChatConfig struct {
	// Hosts are the model servers, as URLs ("http://10.0.0.5:11434") or, where the wire takes
	// them (Ollama's does, as Ollama itself accepts them), "host:port" or "host" without a scheme
	// (http, port 11434). Requests go to a healthy host with the fewest requests in flight.
	// Default: $OLLAMA_HOST, else http://127.0.0.1:11434.
	Hosts []string `json:"hosts,omitempty"`

	// ConnectTimeout bounds establishing a connection (and a TLS handshake) to a host.
	// Default 5s.
	ConnectTimeout time.Duration `json:"connect_timeout,omitempty"`

	// FirstPieceTimeout bounds the wait for the first piece of text, which includes loading the
	// model. Exceeding it fails with KindTimeout. Request.FirstPieceTimeout overrides it.
	// Default 60s.
	FirstPieceTimeout time.Duration `json:"first_piece_timeout,omitempty"`

	// IdleTimeout bounds the wait for the next piece once text is flowing (time spent inside
	// emit does not count). Exceeding it fails with KindInterrupted. Request.IdleTimeout
	// overrides it. Default 30s.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`

	// HealthInterval is how often every host is probed (Wire.Probe; Ollama: HEAD /;
	// OpenAI-compatible: GET /v1/models), so a host marked down after a failed connection comes back. Default 10s.
	HealthInterval time.Duration `json:"health_interval,omitempty"`

	// MaxInFlight caps the requests sent to one host at a time; when every host is at its cap,
	// a request waits in the admission queue (QueueSize) or, without one, fails at once with
	// KindOverloaded. Default 0: no cap (Ollama queues and answers 503 when its own
	// OLLAMA_MAX_QUEUE is full).
	MaxInFlight int `json:"max_in_flight,omitempty"`

	// QueueSize is how many requests may wait, first come first served, for a host below
	// MaxInFlight; one more fails at once with KindOverloaded (ErrQueueFull). Only with
	// MaxInFlight > 0. Default 0: no queue.
	QueueSize int `json:"queue_size,omitempty"`

	// QueueTimeout is the longest wait in the admission queue; past it the request fails with
	// KindOverloaded (ErrQueueTimeout). Default 10s.
	QueueTimeout time.Duration `json:"queue_timeout,omitempty"`

	// HostCounter, when set, counts the requests of every instance that shares it on each host
	// (by host URL), so that MaxInFlight holds for the host rather than for this process. Only
	// with MaxInFlight > 0. Default nil: this process counts its own.
	HostCounter HostCounter `json:"-"`

	// Wire is how the hosts are spoken to: NewOllamaWire (Ollama's own /api/chat),
	// NewOpenAIWire (/v1/chat/completions) or a wire of another package. A Chat's identity for
	// pooling is not in its JSON: the caller tells wires apart. Default: NewOllamaWire(nil).
	Wire Wire `json:"-"`

	// Logger receives host state changes, failovers and start-up checks. Default: no logging.
	Logger *zap.Logger `json:"-"`
}

// Chat is a Backend that streams chat completions from one or more model servers that speak one
// wire (ChatConfig.Wire: Ollama's /api/chat, the OpenAI-compatible /v1/chat/completions, or
// another). It
// owns what is the same on every wire: the hosts and their health, admission, failover before the
// first piece, the first-piece and idle watchdog, batching pieces into flushes and typed errors.
// It is safe for concurrent use. Close stops its health checker.
type Chat struct {
	cfg       ChatConfig
	hosts     []*chatHost
	client    *http.Client
	transport *http.Transport
	// dial opens the chat streams' own connections (conn.go); the Transport's dialer.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	log  *zap.Logger
	wire Wire          // how the hosts are spoken to (ChatConfig.Wire)
	rr   atomic.Uint32 // rotates the tie-break among equally busy hosts
	adm  admission
	// sharedWaiting counts the requests waiting for a host that is full across the instances.
	sharedWaiting atomic.Int64
	// windows are the models' context windows found so far (window.go).
	windows windows

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// NewChat validates cfg, applies its defaults and starts the health checker. It does not
// contact the hosts; call CheckModels at start-up for that.
func NewChat(cfg ChatConfig) (*Chat, error) {
	if len(cfg.Hosts) == 0 {
		if env := strings.TrimSpace(os.Getenv("OLLAMA_HOST")); env != "" {
			cfg.Hosts = []string{env}
		} else {
			cfg.Hosts = []string{DefaultOllamaHost}
		}
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if cfg.FirstPieceTimeout == 0 {
		cfg.FirstPieceTimeout = 60 * time.Second
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 30 * time.Second
	}
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = 10 * time.Second
	}
	if cfg.QueueTimeout == 0 {
		cfg.QueueTimeout = 10 * time.Second
	}
	switch {
	case cfg.ConnectTimeout < 0:
		return nil, fmt.Errorf("model servers' connect_timeout: must not be negative")
	case cfg.FirstPieceTimeout < 0:
		return nil, fmt.Errorf("model servers' first_piece_timeout: must not be negative")
	case cfg.IdleTimeout < 0:
		return nil, fmt.Errorf("model servers' idle_timeout: must not be negative")
	case cfg.HealthInterval < 0:
		return nil, fmt.Errorf("model servers' health_interval: must not be negative")
	case cfg.MaxInFlight < 0:
		return nil, fmt.Errorf("model servers' max_in_flight: must not be negative")
	case cfg.QueueSize < 0:
		return nil, fmt.Errorf("model servers' queue_size: must not be negative")
	case cfg.QueueTimeout < 0:
		return nil, fmt.Errorf("model servers' queue_timeout: must not be negative")
	}
	if cfg.Wire == nil {
		cfg.Wire = NewOllamaWire(nil)
	}
	w := cfg.Wire
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}

	dialer := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
	// The Transport carries the health probes, the model checks, and the chat streams to
	// https:// and proxied hosts; those to plain http:// hosts go over connections of their own
	// (conn.go), with the same limits.
	transport := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: cfg.ConnectTimeout,
		// Many generations run at once against few hosts; the default of 2 idle connections
		// per host would make most requests dial anew.
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		// A compressing proxy in between would buffer the stream; Ollama never compresses.
		DisableCompression: true,
		// Every open stream holds its connection's buffers: the request is a few KB at most
		// (and a longer one is written through), the response is read line by line into the
		// line reader's own buffer. The defaults are 4 KiB each.
		WriteBufferSize: 1 << 10,
		ReadBufferSize:  1 << 10,
		// No ResponseHeaderTimeout: Ollama sends the headers with the first piece, after loading
		// the model, so the first-piece timer bounds that wait instead.
	}
	c := &Chat{
		cfg:       cfg,
		transport: transport,
		dial:      dialer.DialContext,
		// No Client.Timeout: a generation may stream for minutes; the connect, first-piece,
		// idle timeouts and the request's deadline bound it instead.
		client: &http.Client{Transport: transport},
		wire:   w,
		log:    cfg.Logger,
		stop:   make(chan struct{}),
	}
	seen := make(map[string]bool)
	for _, raw := range cfg.Hosts {
		u, err := ParseOllamaHost(raw)
		var chatURL string
		if err == nil {
			chatURL, err = w.ChatURL(raw, u)
		}
		if err != nil {
			return nil, fmt.Errorf("model server hosts: %w", err)
		}
		name := u.String()
		if seen[name] {
			return nil, fmt.Errorf("model server hosts: %s is listed twice", name)
		}
		seen[name] = true
		h := &chatHost{name: name, base: u, chatURL: chatURL}
		if addr := leanHost(u, transport.Proxy); addr != "" {
			h.lean = &leanConns{addr: addr}
		}
		h.healthy.Store(true) // until proven otherwise
		c.hosts = append(c.hosts, h)
	}

	c.wg.Add(1)
	go c.healthLoop()
	return c, nil
}

// ParseOllamaHost parses a host the way Ollama parses OLLAMA_HOST: a URL, or "host:port" /
// "host" / ":port" without a scheme (meaning http, host 127.0.0.1, port 11434). A URL without
// a port gets its scheme's default port.
func ParseOllamaHost(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty host")
	}
	defaultPort := "11434"
	scheme, hostport, ok := strings.Cut(s, "://")
	switch {
	case !ok:
		scheme, hostport = "http", s
	case scheme == "http":
		defaultPort = "80"
	case scheme == "https":
		defaultPort = "443"
	default:
		return nil, fmt.Errorf("host %q: scheme must be http or https", s)
	}
	hostport, path, _ := strings.Cut(hostport, "/")
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = strings.Trim(hostport, "[]"), defaultPort
	}
	if host == "" {
		host = "127.0.0.1"
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return nil, fmt.Errorf("host %q: invalid port %q", s, port)
	}
	u := &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port)}
	if path = strings.Trim(path, "/"); path != "" {
		u.Path = "/" + path
	}
	return u, nil
}

// Generate implements Backend. Without req.Admission it first admits the request (Admit: a host
// below MaxInFlight, waiting in the admission queue if need be); with it, it starts on the
// slot's host and gives the slot back at the end. If the host cannot be reached or is
// overloaded, and no text was emitted yet, it tries the next one (without queueing again).
// Failures are *Error values; ctx's deadline counts like Request.Deadline.
func (c *Chat) Generate(ctx context.Context, req Request, emit Emit) (Stats, error) {
	start := time.Now()
	allowDown := !c.anyHealthy()
	slot, chat, err := c.prepare(ctx, &req, emit)
	if err != nil {
		return Stats{}, err
	}
	defer slot.Release() // the slot's host is released after its attempt; this covers early returns
	var stats Stats
	err = c.attempts(ctx, slot, &req, chat, emit, start, allowDown, &stats)
	return stats, err
}

// prepare checks a request, encodes its chat request and admits it (Admit) unless it came with
// its place (req.Admission). The prompt is in the encoded body afterwards, and the body is needed
// only until text went out (no attempt follows then): a stream of minutes holds neither
// (chatBody).
//
//go:noinline
func (c *Chat) prepare(ctx context.Context, req *Request, emit Emit) (*Slot, *chatBody, error) {
	slot, ok := req.Admission.(*Slot)
	if req.Admission != nil && (!ok || slot == nil || slot.chat != c) {
		req.Admission.Release()
		return nil, nil, &Error{Kind: KindInternal, Err: errors.New("the admission was not made by this backend")}
	}
	fail := func(err error) (*Slot, *chatBody, error) {
		slot.Release()
		return nil, nil, err
	}
	if req.Model == "" || emit == nil {
		return fail(&Error{Kind: KindInternal, Err: errors.New("generate needs a model and an emit function")})
	}
	body, err := c.wire.Encode(*req)
	if err != nil {
		return fail(&Error{Kind: KindInternal, Err: fmt.Errorf("encoding chat request: %w", err)})
	}
	req.System, req.Prompt = "", ""
	if slot == nil {
		adm, err := c.Admit(ctx)
		if err != nil {
			return nil, nil, err
		}
		slot = adm.(*Slot)
	}
	return slot, &chatBody{raw: body}, nil
}

// attempts runs the generation on slot's host and, if that host cannot be reached or is
// overloaded before any text was emitted, on the next one (without queueing again), and leaves
// the last attempt's figures in stats. Hosts marked down are tried only if allowDown.
func (c *Chat) attempts(ctx context.Context, slot *Slot, req *Request, chat *chatBody, emit Emit, start time.Time, allowDown bool, stats *Stats) error {
	var (
		tried   triedSet // allocated only when failing over
		lastErr *Error
	)
	h := slot.h
	var releaseShared func() // the shared place of a failover host
	for {
		var err error
		*stats, err = c.generateOn(ctx, h, req, chat, emit, start)
		if h == slot.h {
			slot.Release()
		} else {
			c.release(h)
			releaseShared()
		}
		if err == nil {
			h.up(c.log)
			return nil
		}
		be := err.(*Error)
		if be.Kind == KindUnavailable {
			h.down(c.log, be.Err)
		}
		// Never after text went out (the two kinds imply no piece; the first test states the rule).
		if be.Pieces > 0 || (be.Kind != KindUnavailable && be.Kind != KindOverloaded) || ctx.Err() != nil {
			return be
		}
		// Prefer reporting "overloaded" (retry soon) over "unavailable" when hosts differ.
		if lastErr == nil || be.Kind == KindOverloaded {
			lastErr = be
		}
		if tried == nil {
			tried = make([]bool, len(c.hosts))
		}
		for i, x := range c.hosts {
			if x == h {
				tried[i] = true
			}
		}
		next, rel := c.pickShared(ctx, tried, allowDown)
		if next == nil {
			return lastErr
		}
		releaseShared = rel
		c.logFailover(h, be)
		h = next
	}
}

//go:noinline
func (c *Chat) logFailover(h *chatHost, be *Error) {
	c.log.Warn("model server host failed before the first piece; trying another host",
		zap.String("host", h.name), zap.Stringer("kind", be.Kind), zap.Error(be.Err))
}

// pick chooses the least busy untried host and counts the request in its in-flight number.
// Hosts marked down are chosen only if allowDown (no host was healthy when Generate began).
// full reports that some candidate was skipped because of MaxInFlight.
func (c *Chat) pick(tried triedSet, allowDown bool) (h *chatHost, full bool) {
	n := len(c.hosts)
	for {
		var best *chatHost
		bestLoad := int64(-1)
		off := 0
		if n > 1 {
			off = int(c.rr.Add(1) % uint32(n))
		}
		for i := 0; i < n; i++ {
			j := (i + off) % n
			if tried.has(j) {
				continue
			}
			x := c.hosts[j]
			if !allowDown && !x.healthy.Load() {
				continue
			}
			load := x.inFlight.Load()
			if c.cfg.MaxInFlight > 0 && load >= int64(c.cfg.MaxInFlight) {
				full = true
				continue
			}
			if best == nil || load < bestLoad {
				best, bestLoad = x, load
			}
		}
		if best == nil {
			return nil, full
		}
		// Another request may have taken the last slot since we looked; then look again.
		if got := best.inFlight.Add(1); c.cfg.MaxInFlight > 0 && got > int64(c.cfg.MaxInFlight) {
			best.inFlight.Add(-1)
			continue
		}
		return best, full
	}
}

type triedSet []bool

func (t triedSet) has(i int) bool { return t != nil && t[i] }

func (c *Chat) anyHealthy() bool {
	for _, h := range c.hosts {
		if h.healthy.Load() {
			return true
		}
	}
	return false
}

// Close stops the health checker and closes idle connections. Generations in progress go on.
// TakesFormat: the Chat's wire sends a Request's Format (FormatWire).
func (c *Chat) TakesFormat() bool {
	fw, ok := c.wire.(FormatWire)
	return ok && fw.TakesFormat()
}

func (c *Chat) Close() error {
	c.closeOnce.Do(func() {
		close(c.stop)
		c.wg.Wait()
		c.transport.CloseIdleConnections()
		for _, h := range c.hosts {
			if h.lean != nil {
				h.lean.close()
			}
		}
	})
	return nil
}

// Interface guards
var (
	_ Backend      = (*Chat)(nil)
	_ Admitter     = (*Chat)(nil)
	_ ModelServers = (*Chat)(nil)
)
