package ollamatest

import (
	"os"
	"path/filepath"

	"github.com/caddy-textgen/textgen/backends/ollamatest/gobin"
)

// OllamaVersion is the pinned Ollama server the tests run against. Newer tags do not build from
// the module proxy (their module zips lack vendored C++ headers); v0.6.8 speaks the same
// /api/chat streaming protocol as current Ollama.
const OllamaVersion = "v0.6.8"

// ollamaProgram is the pinned Ollama server, built with cgo (about 2 minutes on 2 cores).
var ollamaProgram = gobin.Program{
	Module: "github.com/ollama/ollama", Version: OllamaVersion, Name: "ollama",
	EnvOverride: "TEXTGEN_OLLAMA_BIN", Env: []string{"CGO_ENABLED=1"},
}

// CacheDir is where the Ollama binary and the tiny model are cached: $TEXTGEN_CACHE if set,
// else os.UserCacheDir()/caddy-textgen.
func CacheDir() (string, error) { return gobin.CacheDir() }

// BinaryPath is where the pinned Ollama binary is expected: $TEXTGEN_OLLAMA_BIN if set, else
// <CacheDir>/ollama-v0.6.8/ollama. It does not check that the file exists.
func BinaryPath() (string, error) { return ollamaProgram.Path() }

// EnsureBinary returns the path of the pinned Ollama binary, building it first if it is missing
// (`go install github.com/ollama/ollama@v0.6.8`, needs cgo and gcc), once per machine even when
// test packages run in parallel. With $TEXTGEN_OLLAMA_BIN set it only checks that file.
func EnsureBinary() (string, error) { return ollamaProgram.Ensure() }

// EnsureModelFile returns the path of the cached tiny GGUF model, writing it first if missing.
func EnsureModelFile() (string, error) {
	d, err := CacheDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(d, ModelRecipe+".gguf")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	// WriteTinyModel renames a finished file into place, so racing writers are harmless.
	if err := WriteTinyModel(path); err != nil {
		return "", err
	}
	return path, nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
