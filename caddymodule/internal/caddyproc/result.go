package caddyproc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// Result is one finished command.
type Result struct {
	Args           []string
	Stdout, Stderr string
	Code           int // the exit code
}

func (r Result) String() string {
	return fmt.Sprintf("caddy %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.Args, " "), r.Code, r.Stdout, r.Stderr)
}

// Run runs the binary with args, in and with the HOME home, and returns its output and exit
// code.
func Run(t testing.TB, home string, args ...string) Result {
	t.Helper()
	cmd := exec.Command(Binary(t), args...)
	cmd.Env = env(home)
	cmd.Dir = home
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := Result{Args: args, Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.Code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running caddy %v: %v", args, err)
	}
	return res
}

// MustOneJSON requires exit 0 and stdout to be exactly one JSON object, and returns it (numbers
// as json.Number).
func MustOneJSON(t testing.TB, res Result) map[string]any {
	t.Helper()
	if res.Code != 0 {
		t.Fatalf("want exit 0\n%s", res)
	}
	dec := json.NewDecoder(strings.NewReader(res.Stdout))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, res)
	}
	if rest, _ := io.ReadAll(dec.Buffered()); strings.TrimSpace(string(rest)) != "" {
		t.Fatalf("stdout has more than one JSON object: %q\n%s", rest, res)
	}
	return obj
}

// MustFail requires a non-zero exit (exactly code, when code > 0), nothing on stdout, and an
// error on stderr that contains every one of want.
func MustFail(t testing.TB, res Result, code int, want ...string) {
	t.Helper()
	if res.Code == 0 || (code > 0 && res.Code != code) {
		t.Fatalf("want exit %d (non-zero)\n%s", code, res)
	}
	if strings.TrimSpace(res.Stdout) != "" {
		t.Errorf("a failed command printed on stdout\n%s", res)
	}
	for _, w := range want {
		if !strings.Contains(res.Stderr, w) {
			t.Errorf("stderr does not say %q\n%s", w, res)
		}
	}
}

// Str, Num, Bool and List read fields of a JSON object decoded by MustOneJSON.
func Str(t testing.TB, obj map[string]any, key string) string {
	t.Helper()
	v, ok := obj[key].(string)
	if !ok {
		t.Fatalf("field %q is not a string in %v", key, obj)
	}
	return v
}

// Num reads an integer field; see Str.
func Num(t testing.TB, obj map[string]any, key string) int64 {
	t.Helper()
	v, ok := obj[key].(json.Number)
	if !ok {
		t.Fatalf("field %q is not a number in %v", key, obj)
	}
	n, err := v.Int64()
	if err != nil {
		t.Fatalf("field %q: %v", key, err)
	}
	return n
}

// Bool reads a boolean field; see Str.
func Bool(t testing.TB, obj map[string]any, key string) bool {
	t.Helper()
	v, ok := obj[key].(bool)
	if !ok {
		t.Fatalf("field %q is not a boolean in %v", key, obj)
	}
	return v
}

// List reads a list of objects; see Str.
func List(t testing.TB, obj map[string]any, key string) []map[string]any {
	t.Helper()
	raw, ok := obj[key].([]any)
	if !ok {
		t.Fatalf("field %q is not a list in %v", key, obj)
	}
	out := make([]map[string]any, 0, len(raw))
	for _, v := range raw {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("field %q has a non-object item %v", key, v)
		}
		out = append(out, m)
	}
	return out
}
