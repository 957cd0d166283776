package backends

import (
	"bytes"
	"encoding/json"
	"testing"
)

// openaiReference decodes one event's data with encoding/json: what decodeOpenAILine's walker
// must agree with.
func openaiReference(data []byte) (Chunk, openaiStream, error) {
	var ch struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
		Error json.RawMessage `json:"error"`
	}
	var c Chunk
	var st openaiStream
	if err := json.Unmarshal(data, &ch); err != nil {
		return c, st, err
	}
	if len(ch.Error) > 0 && !bytes.Equal(ch.Error, []byte("null")) {
		c.Error = openaiErrorMessage(ch.Error)
	}
	for _, choice := range ch.Choices {
		c.Message.Content += choice.Delta.Content
		if choice.FinishReason != nil && *choice.FinishReason != "" {
			st.finish = *choice.FinishReason
		}
	}
	if ch.Usage != nil {
		st.promptTokens, st.outputTokens = ch.Usage.PromptTokens, ch.Usage.CompletionTokens
	}
	return c, st, nil
}

var openaiSamples = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"logprobs":null,"finish_reason":null}]}`,
	`{"choices":[{"index":0,"delta":{"content":"line\nbreak \"quoted\" \u00e9 \ud83d\ude00"},"finish_reason":null}]}`,
	`{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`,
	`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}}`,
	`{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"},"finish_reason":"stop"}],"usage":null}`,
	`{"error":{"message":"model overloaded","type":"server_error","code":null}}`,
	`{"error":"plain string error"}`,
	`{"error":null,"choices":[{"delta":{"content":null,"tool_calls":[{"id":"x","function":{"arguments":"{}"}}]}}]}`,
	`{"choices":null}`,
	`{"choices":[{"delta":{"content":"x"}}],"extra":{"nested":[1,2.5e3,true,false,null,"s"]}}`,
	`{"choices":[{"delta":{"content":5}}]}`,
	`{"choices":[{"delta":{"content":"x"}}`,
	`[1,2]`,
	`{"usage":{"prompt_tokens":1.5}}`,
}

// TestOpenAIDecodeMatchesEncodingJSON: the walker reads every sample as encoding/json does,
// and fails where it fails.
func TestOpenAIDecodeMatchesEncodingJSON(t *testing.T) {
	for _, data := range openaiSamples {
		checkOpenAIDecode(t, []byte(data))
	}
}

func FuzzOpenAIDecode(f *testing.F) {
	for _, data := range openaiSamples {
		f.Add([]byte(data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if bytes.ContainsAny(data, "\n\r") {
			return // one event's data is one line
		}
		checkOpenAIDecode(t, data)
	})
}

func checkOpenAIDecode(t *testing.T, data []byte) {
	t.Helper()
	if hasCaseVariantOpenAIKey(data) {
		return // encoding/json matches field names in any letter case; servers never rely on it
	}
	wantC, wantSt, wantErr := openaiReference(data)
	var c Chunk
	var st openaiStream
	err := decodeOpenAILine(append([]byte("data: "), data...), &c, &st)
	if wantErr != nil {
		// As decodeChunk: the walker does not check escapes inside values it skips, so it may
		// accept what is not valid JSON there; never valid JSON that encoding/json refuses.
		if err == nil && json.Valid(data) {
			t.Fatalf("%s: encoding/json: %v; the walker accepted it: %+v %+v", data, wantErr, c, st)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %v; encoding/json: %+v %+v", data, err, wantC, wantSt)
	}
	if c != wantC || st != wantSt {
		t.Fatalf("%s: got %+v %+v, encoding/json %+v %+v", data, c, st, wantC, wantSt)
	}
}

// Lines that are not data, and the end marker.
func TestOpenAINonDataLines(t *testing.T) {
	st := openaiStream{finish: "stop", promptTokens: 3, outputTokens: 4}
	for _, line := range []string{": keep-alive", "event: message", "id: 7", "retry: 100"} {
		var c Chunk
		if err := decodeOpenAILine([]byte(line), &c, &st); err != nil || c != (Chunk{}) {
			t.Errorf("%q: %+v %v", line, c, err)
		}
	}
	var c Chunk
	if err := decodeOpenAILine([]byte("data:[DONE]"), &c, &st); err != nil || !c.Done || c.DoneReason != "stop" || c.PromptEvalCount != 3 || c.EvalCount != 4 {
		t.Errorf("[DONE]: %+v %v", c, err)
	}
}

// hasCaseVariantOpenAIKey reports a key that differs from one the walker reads only in letter
// case ("usAge"), which encoding/json matches and the walker, rightly, does not.
func hasCaseVariantOpenAIKey(data []byte) bool {
	lower := bytes.ToLower(data)
	for _, k := range []string{"choices", "delta", "content", "finish_reason", "usage", "prompt_tokens", "completion_tokens", "error", "message"} {
		q := []byte(`"` + k + `"`)
		if bytes.Count(lower, q) != bytes.Count(data, q) {
			return true
		}
	}
	return false
}
