package backends

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

var chunkSeeds = []string{
	`{"model":"tiny","created_at":"2025-05-01T12:00:00Z","message":{"role":"assistant","content":"tok "},"done":false}`,
	`{"model":"tiny","created_at":"2025-05-01T12:00:00.1Z","message":{"role":"assistant","content":""},"done_reason":"length","done":true,"total_duration":28135124,"load_duration":1300938,"prompt_eval_count":29,"prompt_eval_duration":1904825,"eval_count":20,"eval_duration":24014742}`,
	`{"error":"model runner has unexpectedly stopped"}`,
	`{"message":{"content":"line\nbreak \"quoted\" \u00e9\ud83d\ude00 \/ tab\t"},"done":false}`,
	`{"message":{"role":"assistant","content":"x","tool_calls":[{"function":{"name":"f","arguments":{"a":[1,2.5e3,-0.1,true,false,null,{"b":"}]"}]}}}]},"done":false}`,
	`  {"done" : true , "message" : null, "eval_count": null}  `,
	`{"message":{"content":"a"},"message":{"role":"x"},"done":false,"done":true}`,
	`{"message":"not an object"}`,
	`{"done":"yes"}`,
	`{"eval_count":1.5}`,
	`{"eval_count":99999999999999999999999}`,
	`{"content":"top-level content is not the message"}`,
	`{"message":{"content":"\xff\xfe invalid utf8"}}`,
	`{"con\u0074ent":1,"message":{"con\u0074ent":"escaped key"}}`,
	`null`,
	`[]`,
	`{"model":"tiny","message":{"content":"trunc`,
	`{"a":}`,
	`{"a":1,}`,
	`{"a" 1}`,
	`{"a":01}`,
	`{"a":-}`,
	`{"a":tru}`,
	`{} {}`,
	"{\"message\":{\"content\":\"ctl\x01\"}}",
	`{"message":{"content":"a"}}x`,
}

// decodeChunk must give encoding/json's result on every line encoding/json accepts (with the
// field names matched exactly) and reject the malformed ones.
func TestDecodeChunkMatchesEncodingJSON(t *testing.T) {
	for _, line := range chunkSeeds {
		checkAgainstEncodingJSON(t, []byte(line))
	}
}

func FuzzDecodeChunk(f *testing.F) {
	for _, line := range chunkSeeds {
		f.Add([]byte(line))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		checkAgainstEncodingJSON(t, line)
	})
}

func checkAgainstEncodingJSON(t *testing.T, line []byte) {
	t.Helper()
	if hasCaseVariantKey(line) {
		return // encoding/json matches field names in any letter case; Ollama never relies on it
	}
	var want, got Chunk
	wantErr := json.Unmarshal(line, &want)
	gotErr := decodeChunk(line, &got)
	if wantErr != nil {
		if gotErr == nil && json.Valid(line) {
			t.Errorf("%q: encoding/json: %v; decodeChunk accepted it: %+v", line, wantErr, got)
		}
		// decodeChunk does not check the escapes inside values it skips, so it may accept
		// a line that is not valid JSON there; it never accepts one whose fields it reads wrongly.
		return
	}
	if gotErr != nil {
		t.Errorf("%q: decodeChunk: %v; encoding/json: %+v", line, gotErr, want)
		return
	}
	if got != want {
		t.Errorf("%q:\n got %+v\nwant %+v", line, got, want)
	}
}

// hasCaseVariantKey reports a key of the top level or of "message" that equals one of ours
// only when letter case is ignored.
func hasCaseVariantKey(line []byte) bool {
	known := []string{"message", "content", "done", "done_reason", "error", "prompt_eval_count", "eval_count"}
	var check func(raw json.RawMessage, depth int) bool
	check = func(raw json.RawMessage, depth int) bool {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return false
		}
		for k, v := range m {
			for _, kn := range known {
				if strings.EqualFold(k, kn) && k != kn {
					return true
				}
			}
			if depth == 0 && strings.EqualFold(k, "message") && check(v, 1) {
				return true
			}
		}
		return false
	}
	return check(line, 0)
}

func TestLineReader(t *testing.T) {
	long := strings.Repeat("x", 40<<10) // longer than the pooled buffer
	in := "a\n\n  \r\n" + long + "\nlast"
	for _, r := range []io.Reader{strings.NewReader(in), iotest.OneByteReader(strings.NewReader(in))} {
		lr := newLineReader(r)
		var lines []string
		for {
			line, err := lr.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, string(bytes.TrimSpace(line)))
		}
		lr.release()
		if len(lines) != 3 || lines[0] != "a" || lines[1] != long || lines[2] != "last" {
			t.Errorf("lines %d: %.20q", len(lines), lines)
		}
	}
	lr := newLineReader(iotest.TimeoutReader(strings.NewReader("abc\ndef")))
	defer lr.release()
	if line, err := lr.next(); err != nil || string(line) != "abc\n" {
		t.Fatalf("%q %v", line, err)
	}
	if _, err := lr.next(); err != iotest.ErrTimeout {
		t.Errorf("error %v, want the reader's error", err)
	}
}

// BenchmarkDecodeChunk compares decoding one typical piece line with decodeChunk and with
// encoding/json (the backend's previous decoder), without any network in between.
func BenchmarkDecodeChunk(b *testing.B) {
	line := []byte(chunkSeeds[0])
	b.Run("decodeChunk", func(b *testing.B) {
		b.ReportAllocs()
		var c Chunk
		for b.Loop() {
			if err := decodeChunk(line, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		var c Chunk
		for b.Loop() {
			c = Chunk{}
			if err := json.Unmarshal(line, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
