package binarytest

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/caddy-textgen/textgen/backends/ollamatest"
	"github.com/caddy-textgen/textgen/caddymodule/internal/caddyproc"
	"github.com/caddy-textgen/textgen/internal/freeport"
)

// The span names a trace shows, as an operator meets them in their tracing backend.
const (
	spanGenerate   = "textgen.generate"
	spanKeyCheck   = "textgen.key_check"
	spanLimits     = "textgen.limits"
	spanQueueWait  = "textgen.queue_wait"
	spanHold       = "textgen.hold"
	spanFirstPiece = "textgen.model_first_piece"
	spanStream     = "textgen.stream"
	spanSettle     = "textgen.settle"
)

// otlpReceiver is an OTLP/HTTP trace receiver in the test: it decodes the protobuf export
// requests Caddy's exporter sends to /v1/traces and keeps their spans.
type otlpReceiver struct {
	URL   string
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ports, err := freeport.Pick(1)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0]))
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{URL: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(r.serve)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return r
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" {
		http.NotFound(w, req)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var export coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range export.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// byName returns the spans received so far, by name.
func (r *otlpReceiver) byName() map[string][]*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]*tracepb.Span{}
	for _, s := range r.spans {
		out[s.Name] = append(out[s.Name], s)
	}
	return out
}

func spanAttr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

// TestTracingShowsTheSteps runs the built caddy with Caddy's tracing directive and its
// OpenTelemetry exporter pointed (by OTEL_ variables of that process only) at an OTLP receiver
// in the test, sends one generation to the real Ollama, and checks its trace: a
// textgen.generate span under Caddy's server span, with the tool, the status and the credit
// charged, and one child span per step (key check, limits, queue wait, hold, the model's first
// piece, the stream, settle); no attribute of any span carries the key, the account, the input
// or the generated text.
func TestTracingShowsTheSteps(t *testing.T) {
	model := modelServer(t)
	recv := newOTLPReceiver(t)
	dir := ledgerDir(t)
	site := fmt.Sprintf("tracing {\n\t\tspan caddy-textgen\n\t}\n\ttextgen {\n\t\tledger %s\n\t\tollama %s\n\t\tmodel %s\n\t\tfirst_piece_timeout 150s\n\t}",
		dir, model, ollamatest.DefaultModel)
	srv := caddyproc.StartEnv(t, site, dir,
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+recv.URL,
		"OTEL_BSP_SCHEDULE_DELAY=50",
	)
	acct := caddyproc.Str(t, srv.JSON("account", "create", "--email", "trace@example.com"), "id")
	key := caddyproc.Str(t, srv.JSON("key", "create", "--account", acct, "--name", "trace"), "key")
	srv.JSON("credits", "grant", "--account", acct, "--credits", "5", "--reference", "trace-test")

	const input = "Summarize the quarterly invoice of Zebulon Quartz"
	req, err := http.NewRequest(http.MethodPost, "http://"+srv.HTTP+"/api/v1/generate",
		strings.NewReader(genBody("summarizer", input, "en", "")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	text, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(text) == 0 {
		t.Fatalf("generate: %d %v %q", resp.StatusCode, err, text)
	}

	steps := []string{spanKeyCheck, spanLimits, spanQueueWait, spanHold, spanFirstPiece, spanStream, spanSettle}
	var spans map[string][]*tracepb.Span
	// The exporter sends in batches; wait for the request's spans (a bound for a broken exporter,
	// not a timing assertion).
	for range 600 {
		spans = recv.byName()
		if len(spans[spanGenerate]) > 0 && len(spans[spanSettle]) > 0 && len(spans["caddy-textgen"]) > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	gens := spans[spanGenerate]
	if len(gens) != 1 {
		t.Fatalf("%d %s spans, want 1 (spans: %v)", len(gens), spanGenerate, names(spans))
	}
	gen := gens[0]
	server := spans["caddy-textgen"]
	if len(server) != 1 || !bytes.Equal(gen.ParentSpanId, server[0].SpanId) || !bytes.Equal(gen.TraceId, server[0].TraceId) {
		t.Fatalf("%s is not a child of Caddy's server span (%d server spans)", spanGenerate, len(server))
	}
	for attr, want := range map[string]string{"textgen.tool": "summarizer", "textgen.status": "200"} {
		if v := spanAttr(gen, attr); v.GetStringValue() != want {
			t.Errorf("%s %s = %v, want %q", spanGenerate, attr, v, want)
		}
	}
	if v := spanAttr(gen, "textgen.credits_charged"); v.GetIntValue() != 1 {
		t.Errorf("%s textgen.credits_charged = %v, want 1", spanGenerate, v)
	}
	var prevEnd uint64
	for _, name := range steps {
		got := spans[name]
		if len(got) != 1 {
			t.Errorf("%d %s spans, want 1", len(got), name)
			continue
		}
		s := got[0]
		if !bytes.Equal(s.ParentSpanId, gen.SpanId) || !bytes.Equal(s.TraceId, gen.TraceId) {
			t.Errorf("%s: parent %s, want %s (textgen.generate)", name, hex.EncodeToString(s.ParentSpanId), hex.EncodeToString(gen.SpanId))
		}
		if s.StartTimeUnixNano < gen.StartTimeUnixNano || s.EndTimeUnixNano > gen.EndTimeUnixNano || s.EndTimeUnixNano < s.StartTimeUnixNano {
			t.Errorf("%s runs outside textgen.generate or ends before it starts", name)
		}
		if name != spanKeyCheck {
			if v := spanAttr(s, "textgen.tool"); v.GetStringValue() != "summarizer" {
				t.Errorf("%s textgen.tool = %v", name, v)
			}
		}
		// The steps follow each other (the first piece and the stream start together).
		if name != spanStream && s.StartTimeUnixNano < prevEnd {
			t.Errorf("%s starts before the step before it ends", name)
		}
		prevEnd = s.EndTimeUnixNano
	}
	// Nothing secret or private in any span this request made.
	secrets := []string{key, key[len(key)-8:], acct, input, "Zebulon"}
	if out := strings.TrimSpace(string(text)); len(out) > 12 {
		secrets = append(secrets, out)
	}
	for name, list := range spans {
		for _, s := range list {
			for _, kv := range s.Attributes {
				v := kv.Value.String()
				for _, secret := range secrets {
					if secret != "" && strings.Contains(v, secret) {
						t.Errorf("span %s attribute %s carries %q", name, kv.Key, secret)
					}
				}
			}
		}
	}
}

func names(m map[string][]*tracepb.Span) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	return out
}
