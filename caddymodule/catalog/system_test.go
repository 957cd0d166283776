package catalog

import (
	"slices"
	"strings"
	"testing"
)

func TestBuildSystem(t *testing.T) {
	tool, _ := Default().Lookup("email-writer")
	tag, name, ok := DefaultLanguageMatcher().Match("de")
	if !ok {
		t.Fatal("de not supported")
	}
	got := BuildSystem(tool, tag, name, "formal")
	if !strings.HasPrefix(got, tool.System+"\n\n") {
		t.Error("system prompt does not start with the tool's prompt")
	}
	for _, want := range []string{"in German (language tag: de)", "whatever the language of the input", "Tone: formal", "Sie in German"} {
		if !strings.Contains(got, want) {
			t.Errorf("BuildSystem lacks %q:\n%s", want, got)
		}
	}

	got = BuildSystem(tool, "pt-BR", "Brazilian Portuguese", "")
	if !strings.Contains(got, "in Brazilian Portuguese (language tag: pt-BR)") || !strings.Contains(got, "use the tone that fits the tool") {
		t.Errorf("no tone:\n%s", got)
	}
	if strings.Contains(got, "Tone: formal") {
		t.Error("tone text without a tone")
	}
	for _, tone := range Tones {
		got := BuildSystem(tool, "en", "English", tone)
		if !strings.Contains(got, ToneInstruction(tone)) || !strings.Contains(got, "Tone: "+tone+".") {
			t.Errorf("tone %q missing", tone)
		}
	}
	if got := BuildSystem(tool, "en", "", ""); !strings.Contains(got, "in en (language tag: en)") {
		t.Error("empty language name does not fall back to the tag")
	}
	if n := testing.AllocsPerRun(100, func() { BuildSystem(tool, "de", "German", "friendly") }); n != 1 {
		t.Errorf("BuildSystem allocates %v times, want 1", n)
	}
}

func TestTones(t *testing.T) {
	if !slices.Equal(Tones, []string{"formal", "friendly", "direct", "professional"}) {
		t.Fatalf("Tones = %q", Tones)
	}
	for _, tone := range Tones {
		if !IsTone(tone) || ToneInstruction(tone) == noToneSentence {
			t.Errorf("tone %q has no sentence", tone)
		}
	}
	for _, bad := range []string{"", "Formal", "rude"} {
		if IsTone(bad) || ToneInstruction(bad) != noToneSentence {
			t.Errorf("IsTone(%q) accepted", bad)
		}
	}
}

func TestSampleText(t *testing.T) {
	a := SampleText("summarizer", "de")
	b := SampleText("summarizer", "de")
	if !slices.Equal(a, b) {
		t.Fatal("SampleText is not deterministic")
	}
	if len(a) < 3 {
		t.Fatalf("SampleText has %d pieces, want several", len(a))
	}
	all := strings.Join(a, "")
	for _, want := range []string{"[caddy-textgen test mode", "summarizer", "de", "no model was called"} {
		if !strings.Contains(all, want) {
			t.Errorf("sample text lacks %q: %q", want, all)
		}
	}
	for i, p := range a {
		if p == "" {
			t.Errorf("piece %d is empty", i)
		}
	}
}

func BenchmarkBuildSystem(b *testing.B) {
	tool, _ := Default().Lookup("contract-checker")
	b.ReportAllocs()
	for b.Loop() {
		BuildSystem(tool, "pt-BR", "Brazilian Portuguese", "professional")
	}
}

// BenchmarkRequestPath is what the handler does per request: look up the tool, match the
// language, build the system prompt.
func BenchmarkRequestPath(b *testing.B) {
	c := Default()
	b.ReportAllocs()
	for b.Loop() {
		tool, _ := c.Lookup("sql-generator")
		tag, name, _ := DefaultLanguageMatcher().Match("PT-br")
		BuildSystem(tool, tag, name, "direct")
	}
}
