package caddyproc

import (
	"fmt"
	"strings"
	"testing"
)

// A failed test's server log is cut to its warnings and its last lines unless -v asks for all.
func TestLogDigest(t *testing.T) {
	var b strings.Builder
	for i := range 1000 {
		level := "info"
		if i == 10 || i == 500 {
			level = "error"
		}
		fmt.Fprintf(&b, `{"level":"%s","n":%d}`+"\n", level, i)
	}
	got := logDigest(b.String(), false)
	lines := strings.Split(got, "\n")
	want := []string{`{"level":"error","n":10}`, `{"level":"error","n":500}`, "... 995 lines left out (go test -v shows them all)",
		`{"level":"info","n":997}`, `{"level":"info","n":998}`, `{"level":"info","n":999}`}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("digest:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if all := logDigest(b.String(), true); strings.Count(all, "\n") != 999 {
		t.Fatalf("with -v the digest has %d lines, want all 1000", strings.Count(all, "\n")+1)
	}
	if short := "a\nb\n"; logDigest(short, false) != "a\nb" {
		t.Fatalf("a short log is shown whole: %q", logDigest(short, false))
	}
}
