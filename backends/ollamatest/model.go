package ollamatest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/ollama/ollama/fs/ggml"
)

// ModelRecipe names the tiny model's recipe; the cached GGUF file carries it in its name, so a
// change of recipe never reuses an old file.
const ModelRecipe = "tiny-llama-v2"

// tinyWords are whole-word tokens; the model favours them, so its gibberish reads like words.
var tinyWords = []string{
	"▁", // a space on its own (banned from the output): without it a space not followed by a word costs 3 byte tokens, unlike any real model
	"▁the", "▁a", "▁quick", "▁brown", "▁fox", "▁jumps", "▁over", "▁lazy", "▁dog",
	"▁hello", "▁world", "▁text", "▁credit", "▁tiny", "▁model", "▁stream", "▁piece",
	"▁and", "▁of", "▁to", "▁in", "▁is", "▁it", "▁that", "▁for", "▁on", "▁with",
	"▁as", "▁was", "▁be", "▁by", "▁this",
}

// Tiny model shape: 2 blocks, embedding 64, feed-forward 128, 4 heads: the smallest llama that
// Ollama v0.6.8's runner loads and streams from at a few milliseconds a token. Its window,
// TinyWindow tokens, is a small real model's, so that every tool of the catalog fits with an
// input of a few thousand characters (its tokenizer is byte-level: about a token a character).
const (
	tinyEmbd   = 64
	tinyFF     = 128
	tinyHeads  = 4
	tinyBlocks = 2
	TinyWindow = 8192
)

// WriteTinyModel writes the tiny GGUF model to path: a llama-architecture model with random F32
// weights from a fixed seed, so every run writes the same bytes.
//
// The weights are random except for one trick that makes the model well-behaved in tests:
// embedding dimension 0 is a constant "bias" feature that no layer writes to, and the output rows
// of <unk>, <s>, </s>, the control bytes and the bytes >= 0x80 have a large negative weight on
// it. Those tokens are therefore never sampled: the model never stops by itself (so num_predict
// alone sets the output length, and stats are predictable), and every token is printable ASCII
// or a word, so each token becomes exactly one streamed piece (Ollama holds back pieces that end
// in an incomplete UTF-8 sequence and drops empty ones).
func WriteTinyModel(path string) error {
	rng := rand.New(rand.NewPCG(20250521, 6))

	var (
		tokens []string
		scores []float32
		types  []int32
	)
	add := func(tok string, typ int32, score float32) {
		tokens = append(tokens, tok)
		types = append(types, typ)
		scores = append(scores, score)
	}
	add("<unk>", 2, 0)
	add("<s>", 3, 0)
	add("</s>", 3, 0)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), 6, 0)
	}
	for i, w := range tinyWords {
		add(w, 1, -float32(i+1))
	}
	vocab := len(tokens)

	banned := func(tok int) bool {
		if tok < 3 {
			return true
		}
		if tok < 3+256 {
			b := tok - 3
			return b < 0x20 || b >= 0x7f
		}
		return tok == 3+256 // "▁" alone
	}

	randn := func(n int, scale float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64()) * scale
		}
		return v
	}
	ones := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	// zeroRow0 clears output row 0 of a weight with rows of length in, so the layer never writes
	// to the bias dimension.
	zeroRow0 := func(w []float32, in int) []float32 {
		clear(w[:in])
		return w
	}

	tensor := func(name string, data []float32, shape ...uint64) *ggml.Tensor {
		buf := make([]byte, 4*len(data))
		for i, f := range data {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(f))
		}
		return &ggml.Tensor{Name: name, Kind: uint32(ggml.TensorTypeF32), Shape: shape, WriterTo: bytes.NewReader(buf)}
	}

	embd := randn(tinyEmbd*vocab, 0.5)
	for t := 0; t < vocab; t++ {
		embd[t*tinyEmbd] = 2 // the bias feature
	}
	out := randn(tinyEmbd*vocab, 0.3)
	for t := 0; t < vocab; t++ {
		switch {
		case banned(t):
			out[t*tinyEmbd] = -200
		case t >= 3+256:
			out[t*tinyEmbd] = 2 // favour words
		default:
			out[t*tinyEmbd] = 0
		}
	}

	ts := []*ggml.Tensor{
		tensor("token_embd.weight", embd, tinyEmbd, uint64(vocab)),
		tensor("output_norm.weight", ones(tinyEmbd), tinyEmbd),
		tensor("output.weight", out, tinyEmbd, uint64(vocab)),
	}
	for b := 0; b < tinyBlocks; b++ {
		p := fmt.Sprintf("blk.%d.", b)
		ts = append(ts,
			tensor(p+"attn_norm.weight", ones(tinyEmbd), tinyEmbd),
			tensor(p+"attn_q.weight", randn(tinyEmbd*tinyEmbd, 0.2), tinyEmbd, tinyEmbd),
			tensor(p+"attn_k.weight", randn(tinyEmbd*tinyEmbd, 0.2), tinyEmbd, tinyEmbd),
			tensor(p+"attn_v.weight", randn(tinyEmbd*tinyEmbd, 0.2), tinyEmbd, tinyEmbd),
			tensor(p+"attn_output.weight", zeroRow0(randn(tinyEmbd*tinyEmbd, 0.2), tinyEmbd), tinyEmbd, tinyEmbd),
			tensor(p+"ffn_norm.weight", ones(tinyEmbd), tinyEmbd),
			tensor(p+"ffn_gate.weight", randn(tinyEmbd*tinyFF, 0.2), tinyEmbd, tinyFF),
			tensor(p+"ffn_up.weight", randn(tinyEmbd*tinyFF, 0.2), tinyEmbd, tinyFF),
			tensor(p+"ffn_down.weight", zeroRow0(randn(tinyFF*tinyEmbd, 0.2), tinyFF), tinyFF, tinyEmbd),
		)
	}

	kv := ggml.KV{
		"general.architecture":                   "llama",
		"general.name":                           "tiny",
		"general.file_type":                      uint32(0), // all F32
		"general.alignment":                      uint32(32),
		"llama.context_length":                   uint32(TinyWindow),
		"llama.embedding_length":                 uint32(tinyEmbd),
		"llama.block_count":                      uint32(tinyBlocks),
		"llama.feed_forward_length":              uint32(tinyFF),
		"llama.attention.head_count":             uint32(tinyHeads),
		"llama.attention.head_count_kv":          uint32(tinyHeads),
		"llama.attention.layer_norm_rms_epsilon": float32(1e-5),
		"llama.rope.dimension_count":             uint32(tinyEmbd / tinyHeads),
		"llama.rope.freq_base":                   float32(10000),
		"llama.vocab_size":                       uint32(vocab),
		"tokenizer.ggml.model":                   "llama",
		"tokenizer.ggml.tokens":                  tokens,
		"tokenizer.ggml.scores":                  scores,
		"tokenizer.ggml.token_type":              types,
		"tokenizer.ggml.bos_token_id":            uint32(1),
		"tokenizer.ggml.eos_token_id":            uint32(2),
		"tokenizer.ggml.unknown_token_id":        uint32(0),
		"tokenizer.ggml.add_bos_token":           true,
		"tokenizer.ggml.add_eos_token":           false,
	}

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing tiny model: %w", err)
	}
	// Write to a temporary name and rename, so a reader never sees half a file.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tiny-*.gguf")
	if err != nil {
		return fmt.Errorf("writing tiny model: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := ggml.WriteGGUF(tmp, kv, ts); err != nil {
		tmp.Close()
		return fmt.Errorf("writing tiny model: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing tiny model: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing tiny model: %w", err)
	}
	return nil
}
