package caddymodule

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddytest"

	// textgen_account and textgen_console, which the example Caddyfile uses.
	_ "github.com/caddy-textgen/textgen/caddymodule/account"
	"github.com/caddy-textgen/textgen/caddymodule/catalog"
	_ "github.com/caddy-textgen/textgen/caddymodule/console"
	"github.com/caddy-textgen/textgen/caddymodule/internal/sealing"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`textgen {
		ledger /var/lib/textgen
		ollama http://a:11434 http://b:11434
		model llama3.2
		languages de en tr
		max_input_chars 5000
		max_body_size 64KiB
		max_output_tokens 512
		temperature 0.3
		num_ctx 4096
		context llama3.2 131072
		context qwen2.5-coder 32768
		connect_timeout 2s
		first_piece_timeout 30s
		idle_timeout 10s
		generation_timeout 2m
		keep_alive 10m
		hold_ttl 20m
		ledger_cache_accounts 200000
		pull_models
		buy_url https://example.com/account
		log_prompts
		tool sql-generator {
			model qwen2.5-coder
			prompt_file /etc/textgen/sql.md
			max_input_chars 4000
			max_output_tokens 300
			temperature 0.1
		}
		tool summarizer {
			max_input_chars 40000
		}
	}`)
	var h Handler
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if h.Ledger != "/var/lib/textgen" || h.Model != "llama3.2" || h.LedgerCacheAccounts != 200000 {
		t.Errorf("basic fields: %+v", h)
	}
	if w := string(h.WireRaw); w != `{"api":"ollama","hosts":["http://a:11434","http://b:11434"],"keep_alive":600000000000,"pull_models":true}` {
		t.Errorf("wire %s", w)
	}
	if strings.Join(h.Languages, ",") != "de,en,tr" || h.MaxInputChars != 5000 || h.MaxBodyBytes != 64*1024 ||
		h.MaxOutputTokens != 512 || *h.Temperature != 0.3 || h.NumCtx != 4096 ||
		h.Contexts["llama3.2"] != 131072 || h.Contexts["qwen2.5-coder"] != 32768 {
		t.Errorf("limits: %+v", h)
	}
	if time.Duration(h.ConnectTimeout) != 2*time.Second || time.Duration(h.FirstPieceTimeout) != 30*time.Second ||
		time.Duration(h.IdleTimeout) != 10*time.Second || time.Duration(h.GenerationTimeout) != 2*time.Minute ||
		time.Duration(h.HoldTTL) != 20*time.Minute {
		t.Errorf("durations: %+v", h)
	}
	if !h.LogPrompts || h.BuyURL != "https://example.com/account" {
		t.Errorf("flags: %+v", h)
	}
	sql := h.Tools["sql-generator"]
	if sql == nil || sql.Model != "qwen2.5-coder" || sql.PromptFile != "/etc/textgen/sql.md" || sql.MaxInputChars != 4000 ||
		sql.MaxOutputTokens != 300 || *sql.Temperature != 0.1 {
		t.Errorf("tool sql-generator: %+v", sql)
	}
	if s := h.Tools["summarizer"]; s == nil || s.MaxInputChars != 40000 {
		t.Errorf("tool summarizer: %+v", s)
	}
}

func TestUnmarshalCaddyfileErrors(t *testing.T) {
	for input, want := range map[string]string{
		"textgen extra":                                  "wrong argument count",
		"textgen {\n ledger\n}":                          "wrong argument count",
		"textgen {\n ledger a b\n}":                      "wrong argument count",
		"textgen {\n ledger a\n ledger b\n}":             "more than once",
		"textgen {\n context m 100\n context m 200\n}":   "context m specified more than once",
		"textgen {\n context m\n}":                       "context <model> <tokens>",
		"textgen {\n context m 0\n}":                     "not a number of tokens",
		"textgen {\n bogus 1\n}":                         "unrecognized textgen subdirective 'bogus'",
		"textgen {\n max_input_chars lots\n}":            "not a whole number",
		"textgen {\n max_input_chars -5\n}":              "not a whole number",
		"textgen {\n ledger_cache_accounts 0\n}":         "at least 1",
		"textgen {\n temperature warm\n}":                "not a number",
		"textgen {\n idle_timeout soon\n}":               "idle_timeout",
		"textgen {\n max_body_size huge\n}":              "max_body_size",
		"textgen {\n ollama\n}":                          "wrong argument count",
		"textgen {\n pull_models yes\n}":                 "wrong argument count",
		"textgen {\n tool x {\n bogus 1\n }\n}":          "unrecognized subdirective 'bogus'",
		"textgen {\n tool x\n tool x\n}":                 "more than once",
		"textgen {\n tool x {\n model a\n model b\n}\n}": "more than once",
	} {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want error containing %q", input, err, want)
		}
	}
}

func TestValidate(t *testing.T) {
	neg, nan := -1.0, math.NaN()
	for name, c := range map[string]struct {
		h    Handler
		want string // in the error: the setting at fault
	}{
		"no ledger":            {Handler{}, "ledger"},
		"cache of a database":  {Handler{Ledger: "postgres://db/textgen", LedgerCacheAccounts: 10}, "ledger_cache_accounts"},
		"bad temperature":      {Handler{Ledger: "x", Temperature: &neg}, "temperature"},
		"NaN temperature":      {Handler{Ledger: "x", Temperature: &nan}, "temperature"},
		"NaN tool temperature": {Handler{Ledger: "x", Tools: map[string]*ToolConfig{"summarizer": {Temperature: &nan}}}, "temperature"},
		"bad language":         {Handler{Ledger: "x", Languages: []string{"not a language!"}}, "language"},
		"negative tool max":    {Handler{Ledger: "x", Tools: map[string]*ToolConfig{"summarizer": {MaxInputChars: -1}}}, "max_input_chars"},
		"hold_ttl shorter than a generation": {Handler{Ledger: "x", HoldTTL: caddy.Duration(time.Minute),
			GenerationTimeout: caddy.Duration(2 * time.Minute), QueueTimeout: caddy.Duration(10 * time.Second)}, "hold_ttl"},
		"hold_ttl just the generation and queue": {Handler{Ledger: "x", HoldTTL: caddy.Duration(3 * time.Minute),
			GenerationTimeout: caddy.Duration(2 * time.Minute), QueueTimeout: caddy.Duration(time.Minute)}, "hold_ttl"},
	} {
		if err := c.h.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error naming %q", name, err, c.want)
		}
	}
	h := Handler{Ledger: "x", Languages: []string{"de", "pt-BR"}, HoldTTL: caddy.Duration(3*time.Minute + time.Second),
		GenerationTimeout: caddy.Duration(2 * time.Minute), QueueTimeout: caddy.Duration(time.Minute)}
	if err := h.Validate(); err != nil {
		t.Errorf("valid config rejected: %v", err)
	}
}

// TestCaddyfileAdapt checks the JSON the Caddyfile adapter makes of each file in
// testdata/caddyfile_adapt (a Caddyfile, a line of dashes, the expected JSON).
func TestCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob("testdata/caddyfile_adapt/*.caddyfiletest")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.SplitN(string(data), "----------", 2)
		if len(parts) != 2 {
			t.Fatalf("%s: no ---------- separator", f)
		}
		if os.Getenv("UPDATE_GOLDEN") != "" {
			writeGolden(t, f, parts[0])
			continue
		}
		if !caddytest.CompareAdapt(t, f, parts[0], "caddyfile", strings.TrimSpace(parts[1])) {
			t.Errorf("%s: adapted JSON differs", f)
		}
	}
}

// writeGolden rewrites a golden file's expected JSON (run with UPDATE_GOLDEN=1, then review the
// diff before committing it).
func writeGolden(t *testing.T, file, caddyfileText string) {
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfileText), nil)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, out, "", "\t"); err != nil {
		t.Fatal(err)
	}
	data := caddyfileText + "----------\n" + pretty.String() + "\n"
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestToolSettingPrecedence: a tool's own block beats the handler-wide setting, which beats the
// built-in value of the tool, which beats the default.
func TestToolSettingPrecedence(t *testing.T) {
	half, cold := 0.5, 0.05
	builtin, _ := catalog.Default().Lookup("sql-generator")
	if builtin.Temperature == nil || builtin.MaxOutputTokens == 0 {
		t.Fatal("the test expects sql-generator to have built-in temperature and output length")
	}

	h := Handler{Model: "m", MaxInputChars: defaultMaxInputChars, MaxOutputTokens: defaultMaxOutputTokens, languages: catalog.DefaultLanguageMatcher()}
	if err := h.loadTools(toolDefaults{}); err != nil {
		t.Fatal(err)
	}
	if sql := h.tools["sql-generator"]; *sql.temperature != *builtin.Temperature || sql.maxOutputTokens != builtin.MaxOutputTokens {
		t.Errorf("without operator settings the built-in values hold: %+v", sql)
	}
	if s := h.tools["summarizer"]; s.maxInputChars != defaultMaxInputChars || s.model != "m" {
		t.Errorf("summarizer defaults: %+v", s)
	}

	h = Handler{Model: "m", MaxInputChars: 500, MaxOutputTokens: 64, Temperature: &half,
		Tools:     map[string]*ToolConfig{"sql-generator": {Model: "coder", Temperature: &cold, MaxOutputTokens: 32}},
		languages: catalog.DefaultLanguageMatcher()}
	if err := h.loadTools(toolDefaults{maxInputChars: 500, maxOutputTokens: 64, temperature: &half}); err != nil {
		t.Fatal(err)
	}
	if sql := h.tools["sql-generator"]; sql.model != "coder" || *sql.temperature != cold || sql.maxOutputTokens != 32 || sql.maxInputChars != 500 {
		t.Errorf("tool block over handler: %+v", sql)
	}
	if s := h.tools["summarizer"]; *s.temperature != half || s.maxOutputTokens != 64 || s.maxInputChars != 500 || s.model != "m" {
		t.Errorf("handler-wide settings over built-ins: %+v", s)
	}
}

// TestExampleCaddyfileListensOnLoopback: the repository's example Caddyfile (what `./xcaddy.sh
// run` serves) adapts, with My Account (so this test registers textgen_account), and its API
// listens only on the loopback address: a key seen on the network must not be usable from it
// by default.
func TestExampleCaddyfileListensOnLoopback(t *testing.T) {
	body, err := os.ReadFile(filepath.Join("..", "Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	out, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt(body, map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapting the example Caddyfile: %v (warnings %v)", err, warnings)
	}
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Listen []string `json:"listen"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Apps.HTTP.Servers) == 0 {
		t.Fatal("the example Caddyfile has no server")
	}
	for name, srv := range cfg.Apps.HTTP.Servers {
		if len(srv.Listen) == 0 {
			t.Errorf("server %s listens on every interface (no listen addresses)", name)
		}
		for _, l := range srv.Listen {
			if !strings.HasPrefix(l, "127.0.0.1:") && !strings.HasPrefix(l, "[::1]:") {
				t.Errorf("server %s listens on %q, not only on the loopback address", name, l)
			}
		}
	}
}

func TestUnmarshalCaddyfileRetention(t *testing.T) {
	var h Handler
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("textgen {\n ledger x\n retention 30m\n retention_key {env.TEXTGEN_RETENTION_KEY}\n seed 7\n}"))
	if err != nil || time.Duration(h.Retention) != 30*time.Minute || h.RetentionKey != "{env.TEXTGEN_RETENTION_KEY}" || h.Seed == nil || *h.Seed != 7 {
		t.Fatalf("%+v %v", h, err)
	}
	h = Handler{}
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("textgen {\n retention off\n}")); err != nil || h.Retention >= 0 {
		t.Fatalf("retention off: %d %v", h.Retention, err)
	}
	for input, want := range map[string]string{
		"textgen {\n retention\n}":                    "wrong argument count",
		"textgen {\n retention 1m 2m\n}":              "wrong argument count",
		"textgen {\n retention 0s\n}":                 "neither a positive duration nor off",
		"textgen {\n retention soon\n}":               "neither a positive duration nor off",
		"textgen {\n retention_key\n}":                "wrong argument count",
		"textgen {\n seed lucky\n}":                   "not a whole number",
		"textgen {\n retention 1m\n retention off\n}": "more than once",
	} {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want error containing %q", input, err, want)
		}
	}
	for _, bad := range []string{"short", base64.StdEncoding.EncodeToString(make([]byte, 16)), "not base64!"} {
		if _, err := retentionKey(bad).FromSetting(); err == nil {
			t.Errorf("retention key %q accepted", bad)
		}
	}
	if k, err := retentionKey(testRetentionKey).FromSetting(); err != nil || len(k) != 32 {
		t.Errorf("the test key: %v", err)
	}
}

// TestRetentionKeyFile: without retention_key, one key is made in Caddy's data directory with
// mode 0600 and read back the same afterwards; it never goes into the ledger's directory.
func TestRetentionKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "textgen", "retention.key")
	k1, err := sealing.KeyFile(path)
	if err != nil || len(k1) != 32 {
		t.Fatalf("making the key: %v", err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", st, err)
	}
	k2, err := sealing.KeyFile(path)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("the key changed on reading it again: %v", err)
	}
	if !within(filepath.Join(dir, "ledger", "x"), filepath.Join(dir, "ledger")) || within(path, filepath.Join(dir, "ledger")) {
		t.Fatal("within")
	}
	s, _ := newSealer(k1)
	sealed := s.seal("acct_a", "req_b", 3, []byte("hello"))
	if bytes.Contains(sealed, []byte("hello")) {
		t.Fatal("sealed text in clear")
	}
	if p, err := s.open("acct_a", "req_b", 3, sealed); err != nil || string(p) != "hello" {
		t.Fatalf("open: %q %v", p, err)
	}
	for _, moved := range [][3]any{{"acct_x", "req_b", 3}, {"acct_a", "req_x", 3}, {"acct_a", "req_b", 4}} {
		if _, err := s.open(moved[0].(string), moved[1].(string), moved[2].(int), sealed); err == nil {
			t.Errorf("a chunk opened as %v", moved)
		}
	}
}
