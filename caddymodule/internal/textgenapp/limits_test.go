package textgenapp

import (
	"strings"
	"testing"
)

// TestLimitsStore: a store is shared by URL, its password never shows in its name, and a value
// that is not a Redis URL (or a placeholder that resolves to nothing) fails the config.
func TestLimitsStore(t *testing.T) {
	t.Setenv("TEXTGEN_TEST_REDIS", "redis://user:s3cret@127.0.0.1:1/2")
	a, ka, err := LimitsStore("{env.TEXTGEN_TEST_REDIS}", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, kb, err := LimitsStore("redis://user:s3cret@127.0.0.1:1/2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if a != b || ka != kb {
		t.Fatal("one URL, two stores")
	}
	if strings.Contains(a.Name(), "s3cret") || !strings.Contains(a.Name(), "127.0.0.1:1/2") {
		t.Fatalf("name %q", a.Name())
	}
	if n := len(OpenLimitStores()); n != 1 {
		t.Fatalf("%d open stores, want 1", n)
	}
	ReleaseLimitsStore(ka)
	ReleaseLimitsStore(kb)
	if n := len(OpenLimitStores()); n != 0 {
		t.Fatalf("%d open stores after the last release", n)
	}
	for spec, want := range map[string]string{
		"{env.TEXTGEN_TEST_NOTHING}": "resolved to nothing",
		"http://127.0.0.1:6379":      "want a redis://",
		"redis://127.0.0.1:6379/x":   "limits store",
	} {
		if _, _, err := LimitsStore(spec, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", spec, err, want)
		}
	}
}
