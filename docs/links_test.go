package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestRelativeLinks checks that every relative link in the manual (docs/*.md) and the README
// names a file or folder that exists and, where it names a section (#anchor), a heading of that
// file: a renamed heading or a moved page must not leave a reader at a dead link.
func TestRelativeLinks(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join("..", "README.md"), filepath.Join("..", "CHANGELOG.md"))
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(b))
		anchors[path] = a
		return a, nil
	}
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(b)) {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			checked++
			if ref, ok := strings.CutPrefix(l.target, "undefined-reference:"); ok {
				t.Errorf("%s:%d: the link reference [%s] is never defined", page, l.line, ref)
				continue
			}
			file, anchor, _ := strings.Cut(l.target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link %q: %v", page, l.line, l.target, err)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(path, ".md") {
				t.Errorf("%s:%d: link %q: a section of a file that is not Markdown", page, l.line, l.target)
				continue
			}
			a, err := anchorsOf(path)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", page, l.line, l.target, err)
				continue
			}
			if !a[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading with that anchor", page, l.line, l.target, path)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: the link reader is broken")
	}
}

type mdLink struct {
	target string
	line   int
}

var (
	linkRe   = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refDefRe = regexp.MustCompile(`^\s{0,3}\[([^\]]+)\]:\s+(\S+)`)
	refUseRe = regexp.MustCompile(`\]\[([^\]]+)\]`)
)

// markdownLinks returns the targets of the links of a Markdown text, inline and reference
// definitions, outside code blocks and code spans. A reference used but never defined is
// returned with an empty target, which no file matches.
func markdownLinks(text string) []mdLink {
	var out []mdLink
	defined := map[string]bool{}
	var used []mdLink
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if m := refDefRe.FindStringSubmatch(line); m != nil {
			defined[strings.ToLower(m[1])] = true
			out = append(out, mdLink{target: m[2], line: i + 1})
			continue
		}
		plain := stripCodeSpans(line)
		for _, m := range linkRe.FindAllStringSubmatch(plain, -1) {
			out = append(out, mdLink{target: m[1], line: i + 1})
		}
		for _, m := range refUseRe.FindAllStringSubmatch(plain, -1) {
			used = append(used, mdLink{target: strings.ToLower(m[1]), line: i + 1})
		}
	}
	for _, u := range used {
		if !defined[u.target] {
			out = append(out, mdLink{target: "undefined-reference:" + u.target, line: u.line})
		}
	}
	return out
}

func stripCodeSpans(line string) string {
	parts := strings.Split(line, "`")
	for i := 1; i < len(parts); i += 2 {
		parts[i] = ""
	}
	return strings.Join(parts, "")
}

// headingAnchors returns the anchors GitHub makes of a Markdown text's headings: lower case,
// punctuation dropped, spaces as hyphens, a repeated anchor numbered from -1.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}
