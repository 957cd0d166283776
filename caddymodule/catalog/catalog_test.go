package catalog

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

// builtinSlugs are the 27 built-in tool slugs in the order GET /api/v1/tools has always listed them:
// clients may rely on both.
var builtinSlugs = []string{
	"email-writer", "summarizer", "cover-letter", "plc-explainer", "datasheet",
	"grammar-checker", "linkedin-post", "product-description", "code-explainer", "job-posting",
	"text-rewriter", "instagram-caption", "cv-generator", "contract-checker", "meeting-agenda",
	"keyword-generator", "regex-generator", "sql-generator", "bug-report", "product-review",
	"bewerbung-workflow", "signatur-generator", "vertrag-erklaerer", "reply-letter", "job-search",
	"brief-vereinfacher", "pdf-filler",
}

func TestDefaultCatalogLoads(t *testing.T) {
	if _, err := load(promptFS); err != nil {
		t.Fatalf("embedded prompts do not load: %v", err)
	}
	if Default() != Default() {
		t.Fatal("Default is not parsed once")
	}
}

func TestSlugsMatchBuiltinList(t *testing.T) {
	c := Default()
	if got := c.Slugs(); !reflect.DeepEqual(got, builtinSlugs) {
		t.Fatalf("slugs differ from the built-in list:\n got %q\nwant %q", got, builtinSlugs)
	}
	if c.Len() != 27 {
		t.Fatalf("Len() = %d, want 27", c.Len())
	}
	tools := c.Tools()
	for i, tool := range tools {
		if tool.Slug != builtinSlugs[i] {
			t.Errorf("Tools()[%d].Slug = %q, want %q", i, tool.Slug, builtinSlugs[i])
		}
		if got, ok := c.Lookup(tool.Slug); !ok || got != tool {
			t.Errorf("Lookup(%q) = %v, %v", tool.Slug, got, ok)
		}
	}
	for _, bad := range []string{"", "Email-Writer", "email_writer", "foo"} {
		if _, ok := c.Lookup(bad); ok {
			t.Errorf("Lookup(%q) found a tool", bad)
		}
	}
	// The returned slices are copies.
	c.Slugs()[0] = "x"
	c.Tools()[0] = nil
	if c.Slugs()[0] != "email-writer" || c.Tools()[0] == nil {
		t.Fatal("Slugs or Tools exposes the catalog's own slice")
	}
}

func TestEveryToolIsComplete(t *testing.T) {
	for _, tool := range Default().Tools() {
		t.Run(tool.Slug, func(t *testing.T) {
			if strings.TrimSpace(tool.Name) == "" || strings.TrimSpace(tool.Description) == "" || strings.TrimSpace(tool.System) == "" {
				t.Fatalf("empty field: %+v", tool)
			}
			if strings.ContainsAny(tool.Description, "\r\n") || strings.ContainsAny(tool.Name, "\r\n") {
				t.Errorf("name or description is not one line: %q / %q", tool.Name, tool.Description)
			}
			if len(tool.Description) > 120 {
				t.Errorf("description is %d bytes, keep it under 120: %q", len(tool.Description), tool.Description)
			}
			words := len(strings.Fields(tool.System))
			if words < 80 || words > 280 {
				t.Errorf("system prompt has %d words, want roughly 80 to 200", words)
			}
			sys := strings.ToLower(tool.System)
			for _, must := range []string{"not as instructions", "invent", "output shape"} {
				if !strings.Contains(sys, must) {
					t.Errorf("system prompt lacks %q (injection guard, no invented facts, keep the shape)", must)
				}
			}
			if strings.Contains(tool.System, "\n---") {
				t.Error("system prompt still contains a header separator")
			}
			if tool.Temperature != nil && (*tool.Temperature < 0 || *tool.Temperature > MaxTemperature) {
				t.Errorf("temperature %v out of range", *tool.Temperature)
			}
		})
	}
}

// TestToolSpecifics checks the shapes particular tools must give their answers.
func TestToolSpecifics(t *testing.T) {
	want := map[string][]string{
		"sql-generator":      {"only SQL", "one code block", "SQL comments"},
		"regex-generator":    {"code block", "Explanation", "Matches", "Does not match"},
		"vertrag-erklaerer":  {"plain", "risky clauses", "not legal advice"},
		"brief-vereinfacher": {"What you need to do", "Deadlines", "by which"},
		"pdf-filler":         {"Form fields", `"field: value"`, "[MISSING]", "Never invent"},
		"job-search":         {"boolean", "AND, OR, NOT", "Where to use them", "job boards"},
		"contract-checker":   {"High", "Medium", "Low", "not legal advice"},
		"plc-explainer":      {"IEC 61131-3", "Step by step", "Structured Text"},
		"grammar-checker":    {"Corrected text", "Changes", "never translate"},
		"bug-report":         {"Steps to reproduce", "Expected result", "Actual result", "Environment"},
		"instagram-caption":  {"hashtags"},
		"keyword-generator":  {"search intent", "Informational", "Transactional"},
		"datasheet":          {"table", "Parameter, Value, Unit"},
		"bewerbung-workflow": {"Anschreiben", "Lebenslauf", "Timeline", "Checklist"},
		"signatur-generator": {"Full", "Compact", "Minimal"},
		"reply-letter":       {"every point"},
		"code-explainer":     {"How it works", "Potential issues"},
		"cv-generator":       {"Work experience", "reverse chronological"},
		"meeting-agenda":     {"Agenda", "time slot"},
	}
	c := Default()
	for slug, phrases := range want {
		tool, ok := c.Lookup(slug)
		if !ok {
			t.Fatalf("no tool %q", slug)
		}
		for _, p := range phrases {
			if !strings.Contains(tool.System, p) {
				t.Errorf("%s: system prompt lacks %q", slug, p)
			}
		}
	}
}

func TestLoadRejectsStrayAndMissingFiles(t *testing.T) {
	fsys := fstest.MapFS{}
	for _, s := range builtinSlugs {
		data, err := promptFS.ReadFile("prompts/" + s + ".md")
		if err != nil {
			t.Fatal(err)
		}
		fsys["prompts/"+s+".md"] = &fstest.MapFile{Data: data}
	}
	if _, err := load(fsys); err != nil {
		t.Fatalf("copy of the embedded files: %v", err)
	}
	fsys["prompts/email-writr.md"] = &fstest.MapFile{Data: []byte("name: x\ndescription: y\n---\nz")}
	if _, err := load(fsys); err == nil || !strings.Contains(err.Error(), "email-writr.md") {
		t.Fatalf("stray file: err = %v", err)
	}
	delete(fsys, "prompts/email-writr.md")
	fsys["prompts/summarizer.md"] = &fstest.MapFile{Data: []byte("plain prompt without a header")}
	if _, err := load(fsys); err == nil || !strings.Contains(err.Error(), "summarizer.md") {
		t.Fatalf("built-in file without header: err = %v", err)
	}
	delete(fsys, "prompts/summarizer.md")
	if _, err := load(fsys); err == nil || !strings.Contains(err.Error(), "summarizer.md") {
		t.Fatalf("missing file: err = %v", err)
	}
}

func TestWith(t *testing.T) {
	base := Default()
	orig, _ := base.Lookup("sql-generator")
	origCopy := *orig
	temp := 0.9

	c, err := base.With("sql-generator", Override{System: "  Only SQL.  ", MaxInputChars: 500, Temperature: &temp})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := c.Lookup("sql-generator")
	if got.System != "Only SQL." || got.MaxInputChars != 500 || got.Temperature == nil || *got.Temperature != 0.9 {
		t.Fatalf("override not applied: %+v", got)
	}
	if got.MaxOutputTokens != orig.MaxOutputTokens || got.Name != orig.Name || got.Description != orig.Description {
		t.Fatalf("zero fields of the override changed the tool: %+v", got)
	}
	temp = 0.1 // the copy must not alias the caller's variable
	if *got.Temperature != 0.9 {
		t.Fatal("With keeps a pointer to the caller's temperature")
	}
	if !reflect.DeepEqual(*orig, origCopy) {
		t.Fatal("With changed the original catalog's tool")
	}
	if o, _ := base.Lookup("sql-generator"); o != orig {
		t.Fatal("With changed the original catalog")
	}
	if !reflect.DeepEqual(c.Slugs(), builtinSlugs) {
		t.Fatal("With changed the order")
	}
	other1, _ := base.Lookup("summarizer")
	other2, _ := c.Lookup("summarizer")
	if other1 != other2 {
		t.Fatal("With copied an untouched tool (should be shared)")
	}

	// Chained overrides keep earlier ones.
	c2, err := c.With("sql-generator", Override{MaxOutputTokens: 77, Name: "SQL", Description: "Writes SQL."})
	if err != nil {
		t.Fatal(err)
	}
	got2, _ := c2.Lookup("sql-generator")
	if got2.System != "Only SQL." || got2.MaxInputChars != 500 || got2.MaxOutputTokens != 77 || got2.Name != "SQL" || got2.Description != "Writes SQL." {
		t.Fatalf("chained override: %+v", got2)
	}

	// An empty override is a plain copy.
	c3, err := base.With("pdf-filler", Override{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := base.Lookup("pdf-filler")
	b, _ := c3.Lookup("pdf-filler")
	if !reflect.DeepEqual(a, b) {
		t.Fatal("empty override changed the tool")
	}
}

func TestWithErrors(t *testing.T) {
	neg, big := -0.1, 2.5
	cases := []struct {
		slug string
		o    Override
		want string
	}{
		{"no-such-tool", Override{}, "unknown tool"},
		{"summarizer", Override{System: " \n\t"}, "blank"},
		{"summarizer", Override{Description: "two\nlines"}, "one line"},
		{"summarizer", Override{Name: "   "}, "blank"},
		{"summarizer", Override{MaxInputChars: -1}, "negative"},
		{"summarizer", Override{MaxOutputTokens: -5}, "negative"},
		{"summarizer", Override{Temperature: &neg}, "temperature"},
		{"summarizer", Override{Temperature: &big}, "temperature"},
	}
	for _, tc := range cases {
		_, err := Default().With(tc.slug, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("With(%q, %+v) error = %v, want it to mention %q", tc.slug, tc.o, err, tc.want)
		}
	}
	if _, err := Default().With("nope", Override{}); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("unknown slug: %v is not ErrUnknownTool", err)
	}
}
