package catalog

import (
	"strings"
	"testing"
)

func TestParsePromptFileHeader(t *testing.T) {
	p, err := ParsePromptFile([]byte("\uFEFFName: SQL Pro\r\ndescription: Writes SQL.\r\n# a comment\r\n\r\nmax_input_chars: 1000\r\nmax_output_tokens:  256 \r\ntemperature: 0.25\r\n---\r\n\r\nYou write SQL.\r\nOnly SQL.\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !p.HasHeader || p.Name != "SQL Pro" || p.Description != "Writes SQL." || p.MaxInputChars != 1000 ||
		p.MaxOutputTokens != 256 || p.Temperature == nil || *p.Temperature != 0.25 || p.System != "You write SQL.\nOnly SQL." {
		t.Fatalf("got %+v", p)
	}
	o := p.Override()
	if o.System != p.System || o.MaxInputChars != 1000 || o.MaxOutputTokens != 256 || o.Temperature != p.Temperature || o.Name != "SQL Pro" {
		t.Fatalf("Override() = %+v", o)
	}
}

func TestParsePromptFilePartialHeader(t *testing.T) {
	p, err := ParsePromptFile([]byte("temperature: 0\n---\nBe exact."))
	if err != nil {
		t.Fatal(err)
	}
	if p.Temperature == nil || *p.Temperature != 0 || p.Name != "" || p.MaxInputChars != 0 || p.System != "Be exact." {
		t.Fatalf("got %+v", p)
	}
	// A zero temperature from a file is an explicit value, so With applies it.
	c, err := Default().With("summarizer", p.Override())
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := c.Lookup("summarizer")
	if tool.Temperature == nil || *tool.Temperature != 0 || tool.Name != "Summarizer" || tool.System != "Be exact." {
		t.Fatalf("tool after override: %+v", tool)
	}
}

func TestParsePromptFilePlainText(t *testing.T) {
	for _, text := range []string{
		"You are a helpful assistant.\nWrite short answers.",
		"You write SQL.\n---\nMore text after a rule.",     // first line is not key: value
		"Step 1: read the input.\nStep 2: answer.\n---\nx", // keys with spaces are not header keys
		"---\n---\nNote: this looks like a header line.\n---\nbut is plain text",
	} {
		p, err := ParsePromptFile([]byte(text))
		if err != nil {
			t.Errorf("%q: %v", text, err)
			continue
		}
		want := strings.TrimSpace(text)
		if strings.HasPrefix(text, "---\n---\n") {
			want = strings.TrimSpace(strings.TrimPrefix(text, "---\n---\n"))
		} else if p.HasHeader {
			t.Errorf("%q: parsed as header", text)
		}
		if p.System != want || p.Name != "" || p.Temperature != nil {
			t.Errorf("%q: got %+v", text, p)
		}
	}
}

func TestParsePromptFileFrontMatter(t *testing.T) {
	p, err := ParsePromptFile([]byte("---\nname: X\n---\nbody"))
	if err != nil || p.Name != "X" || p.System != "body" {
		t.Fatalf("got %+v, %v", p, err)
	}
}

func TestParsePromptFileErrors(t *testing.T) {
	cases := []struct{ text, want string }{
		{"nmae: typo\n---\nbody", `unknown header key "nmae"`},
		{"name: a\nmodel: llama\n---\nbody", `line 2: unknown header key "model"`},
		{"max_input_chars: lots\n---\nbody", `"lots" is not a whole number`},
		{"max_input_chars: 0\n---\nbody", "not positive"},
		{"max_output_tokens: -3\n---\nbody", "not positive"},
		{"max_output_tokens: 1.5\n---\nbody", "not a whole number"},
		{"temperature: warm\n---\nbody", "not a number"},
		{"temperature: 3\n---\nbody", "outside 0 to 2"},
		{"temperature: NaN\n---\nbody", "outside 0 to 2"},
		{"name: a\nname: b\n---\nbody", "repeated"},
		{"name:\n---\nbody", "empty value"},
		{"name: a\n---\n  \n", "empty"},
		{"", "empty"},
		{"  \n\n", "empty"},
		{"---\nname: a\nbody without end", "never closed"},
		{"---\nno colon here\n---\nbody", "not \"key: value\""},
		{"name: a\xff\n---\nbody", "UTF-8"},
	}
	for _, tc := range cases {
		_, err := ParsePromptFile([]byte(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParsePromptFile(%q) error = %v, want it to contain %q", tc.text, err, tc.want)
		}
	}
}
