// Package gobin installs pinned Go programs that the tests run as real servers (Ollama,
// stripe-mock) into a shared cache folder, once per machine, and finds them there.
package gobin

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

// CacheDir is the cache folder: $TEXTGEN_CACHE if set, else os.UserCacheDir()/caddy-textgen.
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

// Program is one pinned Go program.
type Program struct {
	Module  string // e.g. github.com/ollama/ollama
	Version string // e.g. v0.6.8
	Name    string // the binary's name, e.g. ollama
	// EnvOverride names an environment variable that, when set, is the binary to use instead.
	EnvOverride string
	// Env is added to go install's environment (e.g. CGO_ENABLED=1).
	Env []string
	// BuildInModule builds the program from a throwaway module that requires Module@Version
	// (`go get`, then `go build`) instead of `go install Module@Version`, for programs whose
	// `go install` the module proxy refuses (mailpit: it reads a version list the proxy denies).
	BuildInModule bool
}

// Path is where the binary is expected: the EnvOverride file if set, else
// <CacheDir>/<Name>-<Version>/<Name>. It does not check that the file exists.
func (p Program) Path() (string, error) {
	if v := os.Getenv(p.EnvOverride); p.EnvOverride != "" && v != "" {
		return v, nil
	}
	d, err := CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, p.Name+"-"+p.Version, p.Name), nil
}

// Ensure returns the binary's path, running `go install Module@Version` first if it is missing.
// A file lock makes processes that run at the same time build it only once, and the binary is
// renamed into place when complete, so an interrupted build never leaves a file a later run
// would trust. With EnvOverride set it only checks that file.
func (p Program) Ensure() (string, error) {
	bin, err := p.Path()
	if err != nil {
		return "", err
	}
	if v := os.Getenv(p.EnvOverride); p.EnvOverride != "" && v != "" {
		if err := checkExecutable(bin); err != nil {
			return "", fmt.Errorf("%s: %w", p.EnvOverride, err)
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
	what := fmt.Sprintf("go install %s@%s", p.Module, p.Version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+p.Name+"-build-*")
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	defer os.RemoveAll(tmp)
	steps := [][]string{{"go", "install", p.Module + "@" + p.Version}}
	if p.BuildInModule {
		what = fmt.Sprintf("building %s@%s in a module of its own", p.Module, p.Version)
		steps = [][]string{{"go", "mod", "init", "gobin.local/build"},
			{"go", "get", p.Module + "@" + p.Version},
			{"go", "build", "-o", filepath.Join(tmp, p.Name), p.Module}}
	}
	fmt.Fprintf(os.Stderr, "gobin: building %s %s into %s (once per machine)\n", p.Name, p.Version, dir)
	for _, step := range steps {
		cmd := exec.Command(step[0], step[1:]...)
		cmd.Dir = tmp // outside any module, so the current go.mod plays no part
		cmd.Env = append(append(os.Environ(), "GOBIN="+tmp, "GOFLAGS="), p.Env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			b := out.Bytes()
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			return "", fmt.Errorf("%s: %w\n%s", what, err, b)
		}
	}
	if err := os.Rename(filepath.Join(tmp, p.Name), bin); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return bin, nil
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
