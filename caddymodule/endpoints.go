package caddymodule

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/catalog"
	"github.com/caddy-textgen/textgen/ledger"
)

// serveTools answers GET /api/v1/tools with the catalog (free, no key needed).
func (h *Handler) serveTools(w http.ResponseWriter, r *http.Request, reqID string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, reqID, errMethodNotAllowedGET, -1)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "public, max-age=300")
	hdr.Set("X-Request-Id", reqID)
	hdr.Set("Content-Length", strconv.Itoa(len(h.toolsJSON)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(h.toolsJSON)
	}
}

type toolInfo struct {
	Slug          string `json:"slug"`
	Name          string `json:"name"`
	Description   string `json:"description"`
	MaxInputChars int    `json:"max_input_chars"`
}

type languageInfo struct {
	Tag  string `json:"tag"`
	Name string `json:"name"`
}

type toolsDoc struct {
	Tools          []toolInfo     `json:"tools"`
	Tones          []string       `json:"tones"`
	Languages      []languageInfo `json:"languages"`
	CreditsPerCall int            `json:"credits_per_request"`
}

func (h *Handler) buildToolsJSON(cat *catalog.Catalog) ([]byte, error) {
	doc := toolsDoc{Tones: catalog.Tones, CreditsPerCall: 1}
	for _, slug := range cat.Slugs() {
		t := h.tools[slug]
		doc.Tools = append(doc.Tools, toolInfo{Slug: slug, Name: t.Name, Description: t.Description, MaxInputChars: t.maxInputChars})
	}
	for _, l := range h.languages.Languages() {
		doc.Languages = append(doc.Languages, languageInfo{Tag: l.Tag, Name: l.Name})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	return append(b, '\n'), err
}

type balanceDoc struct {
	AccountID string `json:"account_id"`
	Mode      string `json:"mode"`
	Available int64  `json:"available"`
	Balance   int64  `json:"balance"`
	RequestID string `json:"request_id"`
}

// keyCheck is what Handler.checkKey found out about the X-API-Key of a request.
type keyCheck struct {
	key  ledger.Key
	acct ledger.Account
	// balance and available are the credits of the key's mode; available is -1 until the key
	// is known to be valid (then X-Credits-Remaining is left out of an error answer).
	balance, available int64
	// authLimited: refused by the limit on failed authentications of the client address.
	authLimited bool
}

// checkKey authenticates a request by its X-API-Key for generate and balance: the key's format
// and checksum first (garbage never reaches the store), the client address's limit on failed
// authentications, the key, then the account and its credits. It returns the error to answer
// with, if any; a ledger failure is logged and answered as an internal error, never as a
// missing credit.
func (h *Handler) checkKey(store ledger.Store, w http.ResponseWriter, r *http.Request, reqID string) (keyCheck, *apiError) {
	kc := keyCheck{available: -1}
	presented := r.Header.Get("X-API-Key")
	if presented == "" {
		return kc, errMissingKey
	}
	addr, refused := h.authGate(w, r)
	if refused != nil {
		kc.authLimited = true
		return kc, refused
	}
	key, acct, err := store.LookupKey(r.Context(), presented)
	switch {
	case errors.Is(err, ledger.ErrInvalidKey) || errors.Is(err, ledger.ErrNotFound):
		h.authFailed(addr)
		return kc, errInvalidKey
	case err != nil:
		h.logger.Error("looking up key", zap.String("request_id", reqID), zap.Error(err))
		return kc, errInternal
	}
	b, err := store.Balance(r.Context(), acct.ID)
	if err != nil {
		h.logger.Error("reading the balance", zap.String("request_id", reqID), zap.Error(err))
		return kc, errInternal
	}
	kc.key, kc.acct = key, acct
	kc.balance, kc.available = b.Balance, b.Available
	if key.Mode == ledger.Test {
		kc.balance, kc.available = b.TestBalance, b.TestAvailable
	}
	if acct.Status == ledger.StatusDisabled {
		return kc, errAccountDisabled
	}
	return kc, nil
}

// serveBalance answers GET /api/v1/balance for the account of the X-API-Key: the credits of the
// key's mode (live or test).
func (h *Handler) serveBalance(w http.ResponseWriter, r *http.Request, reqID string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, reqID, errMethodNotAllowedGET, -1)
		return
	}
	kc, e := h.checkKey(h.store(), w, r, reqID)
	if e != nil {
		writeError(w, reqID, e, kc.available)
		return
	}
	doc := balanceDoc{AccountID: kc.acct.ID, Mode: string(kc.key.Mode), Available: kc.available, Balance: kc.balance, RequestID: reqID}
	body, _ := json.Marshal(doc)
	body = append(body, '\n')
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Request-Id", reqID)
	hdr.Set("X-Credits-Used", "0")
	hdr.Set("X-Credits-Remaining", strconv.FormatInt(doc.Available, 10))
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

// sampleBackend serves test keys: they never call the model (CONTRACT section 4) and get a
// fixed, clearly marked sample text.
type sampleBackend struct{ tool, lang string }

func (sb sampleBackend) Generate(ctx context.Context, _ backends.Request, emit backends.Emit) (backends.Stats, error) {
	start := time.Now()
	pieces := catalog.SampleText(sb.tool, sb.lang)
	st := backends.Stats{Host: "test-mode", DoneReason: "stop"}
	for i, p := range pieces {
		if err := ctx.Err(); err != nil {
			return st, &backends.Error{Kind: backends.KindCanceled, Pieces: i, Err: err}
		}
		if err := emit(p); err != nil {
			return st, &backends.Error{Kind: backends.KindCanceled, Pieces: i, Err: err}
		}
		if i == 0 {
			st.TimeToFirst = time.Since(start)
		}
		st.Pieces++
		st.OutputTokens++
	}
	st.Total = time.Since(start)
	return st, nil
}

// wantsSSE reports whether the client asked for server-sent events.
func wantsSSE(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err == nil && mt == "text/event-stream" {
				return true
			}
		}
	}
	return false
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newRequestID returns "req_" and 22 random base62 characters (about 131 bits).
func newRequestID() string {
	var raw [22]byte
	_, _ = rand.Read(raw[:])
	b := make([]byte, 4, 26)
	copy(b, "req_")
	for _, c := range raw {
		// 248 = 4*62: drop the biased top values by folding them (the bias left is negligible
		// for an id, which needs uniqueness, not uniformity).
		b = append(b, base62[int(c)%62])
	}
	return string(b)
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// appendJSONString appends s as a JSON string literal, escaping what JSON and SSE framing need.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c != 0xE2 {
			continue
		}
		if c == 0xE2 { // U+2028 and U+2029 break JavaScript string literals: escape them
			if i+2 < len(s) && s[i+1] == 0x80 && (s[i+2] == 0xA8 || s[i+2] == 0xA9) {
				dst = append(dst, s[start:i]...)
				dst = append(dst, `\u202`...)
				dst = append(dst, hex[s[i+2]&0xF])
				i += 2
				start = i + 1
			}
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func (h *Handler) ollamaConfig() backends.OllamaConfig {
	cfg := backends.OllamaConfig{
		Hosts:             h.Ollama,
		ConnectTimeout:    time.Duration(h.ConnectTimeout),
		FirstPieceTimeout: time.Duration(h.FirstPieceTimeout),
		IdleTimeout:       time.Duration(h.IdleTimeout),
		QueueTimeout:      time.Duration(h.QueueTimeout),
		Logger:            h.logger.Named("ollama"),
	}
	// -1 (off) in the handler is 0 (none) in the backend.
	if h.MaxInFlight > 0 {
		cfg.MaxInFlight = h.MaxInFlight
		if h.QueueSize > 0 {
			cfg.QueueSize = h.QueueSize
		}
	}
	if h.KeepAlive != 0 {
		ka := time.Duration(h.KeepAlive)
		cfg.KeepAlive = &ka
	}
	return cfg
}
