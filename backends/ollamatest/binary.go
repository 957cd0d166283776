package ollamatest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// OllamaVersion is the pinned Ollama server the tests run against. Newer tags do not build from
// the module proxy (their module zips lack vendored C++ headers); v0.6.8 speaks the same
// /api/chat streaming protocol as current Ollama.
const OllamaVersion = "v0.6.8"

// CacheDir is where the Ollama binary and the tiny model are cached: $TEXTGEN_CACHE if set,
// else os.UserCacheDir()/caddy-textgen.
func CacheDir() (string, error) {
	if d := os.Getenv("TEXTGEN_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the cache folder (set TEXTGEN_CACHE): %w", err)
	}
	return filepath.Join(d, "caddy-textgen"), nil
}

// BinaryPath is where the pinned Ollama binary is expected: $TEXTGEN_OLLAMA_BIN if set, else
// <CacheDir>/ollama-v0.6.8/ollama. It does not check that the file exists.
func BinaryPath() (string, error) {
	if p := os.Getenv("TEXTGEN_OLLAMA_BIN"); p != "" {
		return p, nil
	}
	d, err := CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "ollama-"+OllamaVersion, "ollama"), nil
}

// EnsureBinary returns the path of the pinned Ollama binary, building it first if it is missing
// (`go install github.com/ollama/ollama@v0.6.8`, about 2 minutes on 2 cores, needs cgo and gcc).
// A file lock makes test packages that run in parallel build it only once. With
// $TEXTGEN_OLLAMA_BIN set it only checks that file.
func EnsureBinary() (string, error) {
	bin, err := BinaryPath()
	if err != nil {
		return "", err
	}
	if os.Getenv("TEXTGEN_OLLAMA_BIN") != "" {
		if err := checkExecutable(bin); err != nil {
			return "", fmt.Errorf("TEXTGEN_OLLAMA_BIN: %w", err)
		}
		return bin, nil
	}
	if checkExecutable(bin) == nil {
		return bin, nil
	}
	dir := filepath.Dir(bin)
	unlock, err := lockFile(dir + ".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if checkExecutable(bin) == nil { // built by another process while we waited
		return bin, nil
	}

	// Install into a fresh folder and rename the binary into place, so an interrupted build
	// never leaves a half-written binary that a later run would trust.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("building ollama: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".ollama-build-*")
	if err != nil {
		return "", fmt.Errorf("building ollama: %w", err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "install", "github.com/ollama/ollama@"+OllamaVersion)
	cmd.Dir = tmp // outside any module, so the current go.mod plays no part
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=1", "GOFLAGS=")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	fmt.Fprintf(os.Stderr, "ollamatest: building ollama %s into %s (takes a few minutes once)\n", OllamaVersion, dir)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building ollama: go install github.com/ollama/ollama@%s: %w\n%s", OllamaVersion, err, tail(out.Bytes(), 4000))
	}
	if err := os.Rename(filepath.Join(tmp, "ollama"), bin); err != nil {
		return "", fmt.Errorf("building ollama: %w", err)
	}
	return bin, nil
}

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

func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 || fi.Size() == 0 {
		return &fs.PathError{Op: "exec", Path: path, Err: errors.New("not an executable file")}
	}
	return nil
}

// lockFile takes an exclusive flock on path (created if needed), blocking until it is free.
func lockFile(path string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
