package catalog

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/text/language"
	"golang.org/x/text/language/display"
)

// Languages is the default supported set of output languages: the 24 official languages of the
// EU, then Turkish, Ukrainian, Russian, Arabic, Chinese and Japanese. A bare language such as "pt"
// also accepts its regional and script variants ("pt-BR", "zh-Hans"). Do not modify it; pass a
// copy to NewLanguageMatcher to configure another set.
var Languages = []string{
	"bg", "cs", "da", "de", "el", "en", "es", "et", "fi", "fr", "ga", "hr",
	"hu", "it", "lt", "lv", "mt", "nl", "pl", "pt", "ro", "sk", "sl", "sv",
	"tr", "uk", "ru", "ar", "zh", "ja",
}

// Language is one supported output language: its canonical BCP 47 tag and English name.
type Language struct {
	Tag  string `json:"tag"`
	Name string `json:"name"`
}

// maxTagLen bounds the tags worth parsing; BCP 47 asks implementations to handle 35 characters.
const maxTagLen = 64

// maxCachedTags bounds the per-matcher cache of accepted tags beyond the supported set, so that
// clients sending many distinct valid variants cannot grow memory without limit.
const maxCachedTags = 1024

type langEntry struct {
	canonical, name string
}

// LanguageMatcher matches request language tags against a supported set. It is safe for
// concurrent use; accepted tags are cached, so the common case costs one map lookup and no
// allocation.
type LanguageMatcher struct {
	languages []Language
	bases     map[language.Base]bool // supported entries without script, region or variant
	exact     map[string]bool        // canonical supported entries with script, region or variant

	mu    sync.Mutex                           // serializes cache writers
	cache atomic.Pointer[map[string]langEntry] // lower-case tag -> entry; copy on write
	added int                                  // entries added beyond the supported set, under mu
}

// NewLanguageMatcher builds a matcher for the given BCP 47 tags. A bare language ("pt") accepts
// every tag with that language ("pt", "pt-BR", "pt-PT"); a more specific entry ("pt-BR") accepts
// only that tag. It fails for an empty set or an entry that is not a valid tag.
func NewLanguageMatcher(supported []string) (*LanguageMatcher, error) {
	if len(supported) == 0 {
		return nil, fmt.Errorf("no supported languages")
	}
	m := &LanguageMatcher{
		bases: make(map[language.Base]bool, len(supported)),
		exact: make(map[string]bool),
	}
	cache := make(map[string]langEntry, 2*len(supported))
	for _, s := range supported {
		tag, ok := parseTag(s)
		if !ok {
			return nil, fmt.Errorf("supported language %q is not a valid BCP 47 language tag", s)
		}
		e := entryFor(tag)
		if _, dup := cache[strings.ToLower(e.canonical)]; dup {
			continue
		}
		b, sc, r := tag.Raw()
		if sc == (language.Script{}) && r == (language.Region{}) && len(tag.Variants()) == 0 {
			m.bases[b] = true
		} else {
			m.exact[e.canonical] = true
		}
		cache[strings.ToLower(e.canonical)] = e
		m.languages = append(m.languages, Language{Tag: e.canonical, Name: e.name})
	}
	m.cache.Store(&cache)
	return m, nil
}

// Languages returns the supported set, canonical tags with English names, in configured order.
func (m *LanguageMatcher) Languages() []Language {
	return append([]Language(nil), m.languages...)
}

// Tags returns the canonical supported tags in configured order.
func (m *LanguageMatcher) Tags() []string {
	out := make([]string, len(m.languages))
	for i, l := range m.languages {
		out[i] = l.Tag
	}
	return out
}

// Match reports whether tag (BCP 47, any letter case, "_" accepted for "-") names a supported
// language. It returns the canonical tag ("PT-br" -> "pt-BR"; extensions and private-use parts
// dropped) and its English name ("Brazilian Portuguese"). Garbage, unknown and unsupported
// languages give ok = false.
func (m *LanguageMatcher) Match(tag string) (canonical, englishName string, ok bool) {
	if len(tag) == 0 || len(tag) > maxTagLen {
		return "", "", false
	}
	var buf [maxTagLen]byte
	key := buf[:len(tag)]
	for i := 0; i < len(tag); i++ {
		c := tag[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c == '_':
			c = '-'
		}
		key[i] = c
	}
	if e, hit := (*m.cache.Load())[string(key)]; hit { // no allocation: the compiler special-cases this
		return e.canonical, e.name, true
	}
	return m.matchSlow(tag, string(key))
}

func (m *LanguageMatcher) matchSlow(tag, key string) (string, string, bool) {
	t, ok := parseTag(tag)
	if !ok {
		return "", "", false
	}
	e := entryFor(t)
	b, _ := t.Base()
	if !m.bases[b] && !m.exact[e.canonical] {
		return "", "", false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.cache.Load()
	if _, hit := old[key]; !hit && m.added < maxCachedTags {
		next := make(map[string]langEntry, len(old)+1)
		for k, v := range old {
			next[k] = v
		}
		next[key] = e
		m.cache.Store(&next)
		m.added++
	}
	return e.canonical, e.name, true
}

// parseTag parses s and reduces it to language, script, region and variants. Tags that do not
// parse, name no language ("und", "x-private") or are unknown are rejected.
func parseTag(s string) (language.Tag, bool) {
	if s == "" || len(s) > maxTagLen {
		return language.Und, false
	}
	t, err := language.Parse(s)
	if err != nil {
		return language.Und, false
	}
	b, sc, r := t.Raw()
	if b == (language.Base{}) {
		return language.Und, false
	}
	if _, conf := t.Base(); conf != language.Exact {
		return language.Und, false
	}
	t, err = language.Compose(b, sc, r, t.Variants())
	if err != nil {
		return language.Und, false
	}
	return t, true
}

var englishTags = display.English.Tags()
var englishLanguages = display.English.Languages()

// entryFor returns the canonical form and English name of a parsed tag.
func entryFor(t language.Tag) langEntry {
	name := englishTags.Name(t)
	if name == "" || name == "Unknown language" {
		b, _ := t.Base()
		name = englishLanguages.Name(b)
	}
	canonical := t.String()
	if name == "" {
		name = canonical
	}
	return langEntry{canonical: canonical, name: name}
}

// defaultMatcher is the matcher for the default Languages set; TestMatchLanguage proves it builds.
var defaultMatcher = sync.OnceValue(func() *LanguageMatcher {
	m, err := NewLanguageMatcher(append([]string(nil), Languages...))
	if err != nil {
		panic("catalog: default languages are broken: " + err.Error())
	}
	return m
})

// DefaultLanguageMatcher returns the shared matcher for the default Languages set.
func DefaultLanguageMatcher() *LanguageMatcher { return defaultMatcher() }
