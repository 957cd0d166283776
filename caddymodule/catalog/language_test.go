package catalog

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestLanguagesDefaultSet(t *testing.T) {
	eu := []string{"bg", "cs", "da", "de", "el", "en", "es", "et", "fi", "fr", "ga", "hr", "hu", "it", "lt", "lv", "mt", "nl", "pl", "pt", "ro", "sk", "sl", "sv"}
	for _, l := range append(eu, "tr", "uk", "ru", "ar", "zh", "ja") {
		if !slices.Contains(Languages, l) {
			t.Errorf("Languages lacks %q", l)
		}
	}
	if len(Languages) != 30 {
		t.Errorf("len(Languages) = %d, want 30", len(Languages))
	}
	m := DefaultLanguageMatcher()
	if got := m.Tags(); !slices.Equal(got, Languages) {
		t.Errorf("matcher tags %q", got)
	}
	for _, l := range m.Languages() {
		if l.Name == "" || l.Name == l.Tag {
			t.Errorf("no English name for %q", l.Tag)
		}
	}
}

func TestMatchLanguage(t *testing.T) {
	cases := []struct {
		in, tag, name string
		ok            bool
	}{
		{"de", "de", "German", true},
		{"EN", "en", "English", true},
		{"pt-br", "pt-BR", "Brazilian Portuguese", true},
		{"PT-br", "pt-BR", "Brazilian Portuguese", true},
		{"pt_BR", "pt-BR", "Brazilian Portuguese", true},
		{"zh-Hans", "zh-Hans", "Simplified Chinese", true},
		{"zh-hant-tw", "zh-Hant-TW", "Traditional Chinese (Taiwan)", true},
		{"en-US", "en-US", "American English", true},
		{"en-gb", "en-GB", "British English", true},
		{"de-AT", "de-AT", "Austrian German", true},
		{"fr-BE", "fr-BE", "French (Belgium)", true},
		{"es-419", "es-419", "Latin American Spanish", true},
		{"de-DE-u-co-phonebk", "de-DE", "German (Germany)", true}, // extensions dropped
		{"en-x-private", "en", "English", true},
		{"ga", "ga", "Irish", true},
		{"mt", "mt", "Maltese", true},
		{"tr", "tr", "Turkish", true},
		{"uk", "uk", "Ukrainian", true},
		{"ja", "ja", "Japanese", true},
		{"ar", "ar", "Arabic", true},
		{"deu", "de", "German", true}, // ISO 639-2 code, canonicalized
		// garbage
		{"", "", "", false},
		{"xx-invalid-!!", "", "", false},
		{"klingon-ish", "", "", false},
		{"und", "", "", false},
		{"x-klingon", "", "", false},
		{"de;drop table", "", "", false},
		{strings.Repeat("a", 200), "", "", false},
		{"de-" + strings.Repeat("x", 70), "", "", false},
		// valid but unsupported
		{"xh", "", "", false},
		{"tlh", "", "", false},
		{"no", "", "", false},
		{"he", "", "", false},
		{"iw", "", "", false},
	}
	for _, tc := range cases {
		// Twice: the second call is served from the cache.
		for i := 0; i < 2; i++ {
			tag, name, ok := DefaultLanguageMatcher().Match(tc.in)
			if tag != tc.tag || name != tc.name || ok != tc.ok {
				t.Errorf("MatchLanguage(%q) #%d = %q, %q, %v; want %q, %q, %v", tc.in, i, tag, name, ok, tc.tag, tc.name, tc.ok)
			}
		}
	}
}

func TestLanguageMatcherCustomSet(t *testing.T) {
	m, err := NewLanguageMatcher([]string{"pt-BR", "EN", "de", "de"})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Tags(); !slices.Equal(got, []string{"pt-BR", "en", "de"}) {
		t.Fatalf("Tags() = %q", got)
	}
	for in, want := range map[string]bool{"pt-br": true, "pt": false, "pt-PT": false, "en-AU": true, "de-CH": true, "fr": false} {
		if _, _, ok := m.Match(in); ok != want {
			t.Errorf("Match(%q) ok = %v, want %v", in, ok, want)
		}
	}
	for _, bad := range [][]string{nil, {}, {"de", "not a tag!"}, {"x-private"}} {
		if _, err := NewLanguageMatcher(bad); err == nil {
			t.Errorf("NewLanguageMatcher(%q) accepted", bad)
		}
	}
	// Another set: only its languages, with their regions.
	fr, err := NewLanguageMatcher([]string{"fr"})
	if err != nil {
		t.Fatal(err)
	}
	if tag, _, ok := fr.Match("FR-ca"); !ok || tag != "fr-CA" {
		t.Errorf("custom set: %q %v", tag, ok)
	}
	if _, _, ok := fr.Match("de"); ok {
		t.Error("custom set accepted de")
	}
}

func TestLanguageCacheBounded(t *testing.T) {
	m, err := NewLanguageMatcher([]string{"en"})
	if err != nil {
		t.Fatal(err)
	}
	regions := []string{"US", "GB", "AU", "CA", "IE", "NZ", "IN", "ZA", "SG", "MT"}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1500; i++ {
				// Many distinct valid tags: region plus a numeric variant-like private part.
				tag := fmt.Sprintf("en-%s-x-%d", regions[i%len(regions)], i)
				if _, _, ok := m.Match(tag); !ok {
					t.Errorf("Match(%q) rejected", tag)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := len(*m.cache.Load()); n > maxCachedTags+1 {
		t.Fatalf("cache grew to %d entries", n)
	}
}

func TestMatchLanguageAllocs(t *testing.T) {
	DefaultLanguageMatcher().Match("PT-br") // warm the cache
	for _, in := range []string{"de", "EN", "PT-br"} {
		if n := testing.AllocsPerRun(100, func() { DefaultLanguageMatcher().Match(in) }); n != 0 {
			t.Errorf("Match(%q) allocates %v times", in, n)
		}
	}
}

func BenchmarkMatchLanguage(b *testing.B) {
	for _, in := range []string{"de", "EN", "pt-BR", "zh-Hans", "xx-invalid-!!"} {
		b.Run(in, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				DefaultLanguageMatcher().Match(in)
			}
		})
	}
	b.Run("parallel/pt-BR", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				DefaultLanguageMatcher().Match("pt-BR")
			}
		})
	})
}

func BenchmarkLanguageMatcher(b *testing.B) {
	m := DefaultLanguageMatcher()
	for _, in := range []string{"de", "PT-br"} {
		b.Run(in, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m.Match(in)
			}
		})
	}
}
