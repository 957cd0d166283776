package catalog

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// PromptFile is a parsed prompt file: the built-in prompts/<slug>.md files and the operator's
// per-tool prompt files share this format.
//
// A file is either plain text, used whole as the system prompt, or a header block followed by a
// line "---" and the system prompt. The header is a list of "key: value" lines; blank lines and
// lines starting with "#" are ignored. It may also be opened by a "---" line (front-matter style),
// which is how a prompt whose first line looks like "Word: ..." followed by a "---" rule is kept as
// plain text: start the file with two "---" lines. Keys:
//
//	name:              the tool's display name
//	description:       one line for GET /api/v1/tools
//	max_input_chars:   positive integer
//	max_output_tokens: positive integer
//	temperature:       number from 0 to 2
//
// Keys are case-insensitive. An unknown or repeated key, a bad number or an empty system prompt
// is an error.
type PromptFile struct {
	Name            string
	Description     string
	System          string
	MaxInputChars   int
	MaxOutputTokens int
	Temperature     *float64
	// HasHeader reports whether the file had a header block.
	HasHeader bool
}

// Override returns the file's fields as an Override for Catalog.With: set fields replace the
// tool's, absent ones leave it unchanged.
func (p PromptFile) Override() Override {
	return Override{
		Name:            p.Name,
		Description:     p.Description,
		System:          p.System,
		MaxInputChars:   p.MaxInputChars,
		MaxOutputTokens: p.MaxOutputTokens,
		Temperature:     p.Temperature,
	}
}

// headerKeys are the keys a header may set, in the order the error message lists them.
var headerKeys = []string{"name", "description", "max_input_chars", "max_output_tokens", "temperature"}

// ParsePromptFile parses a prompt file (see PromptFile for the format).
func ParsePromptFile(data []byte) (PromptFile, error) {
	var p PromptFile
	if !utf8.Valid(data) {
		return p, errors.New("prompt file is not valid UTF-8")
	}
	text := strings.TrimPrefix(string(data), "\uFEFF")
	text = strings.ReplaceAll(text, "\r\n", "\n")
	lines := strings.Split(text, "\n")

	start, end, err := headerBounds(lines)
	if err != nil {
		return p, err
	}
	body := text
	if end >= 0 {
		p.HasHeader = true
		if err := p.parseHeader(lines[start:end], start); err != nil {
			return PromptFile{}, err
		}
		body = strings.Join(lines[end+1:], "\n")
	}
	p.System = strings.TrimSpace(body)
	if p.System == "" {
		return PromptFile{}, errors.New("the system prompt is empty")
	}
	return p, nil
}

// headerBounds returns the header lines as lines[start:end], with lines[end] the closing "---",
// or end = -1 when the file has no header. A file that opens with "---" must close its header.
// Otherwise the file has a header only when every line before the first "---" is blank, a
// comment or looks like "key: value", and at least one does: anything else is plain text.
func headerBounds(lines []string) (start, end int, err error) {
	if len(lines) > 0 && strings.TrimSpace(lines[0]) == "---" {
		for i := 1; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) == "---" {
				return 1, i, nil
			}
		}
		return 0, -1, errors.New("line 1: the header block opened by \"---\" is never closed by a \"---\" line")
	}
	keys := 0
	for i, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case t == "---":
			if keys == 0 {
				return 0, -1, nil
			}
			return 0, i, nil
		case t == "" || strings.HasPrefix(t, "#"):
		case looksLikeHeaderLine(t):
			keys++
		default:
			return 0, -1, nil
		}
	}
	return 0, -1, nil
}

// looksLikeHeaderLine reports whether t starts with an identifier followed by a colon.
func looksLikeHeaderLine(t string) bool {
	k, _, ok := strings.Cut(t, ":")
	if !ok || k == "" {
		return false
	}
	k = strings.TrimRight(k, " \t")
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '-' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func (p *PromptFile) parseHeader(lines []string, first int) error {
	seen := make(map[string]bool, len(headerKeys))
	for i, l := range lines {
		lineNo := first + i + 1
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		k, v, ok := strings.Cut(t, ":")
		if !ok {
			return fmt.Errorf("line %d: header line %q is not \"key: value\"", lineNo, t)
		}
		k = strings.ToLower(strings.TrimSpace(k))
		v = strings.TrimSpace(v)
		if seen[k] {
			return fmt.Errorf("line %d: header key %q is repeated", lineNo, k)
		}
		seen[k] = true
		var err error
		switch k {
		case "name":
			p.Name, err = nonEmpty(v)
		case "description":
			p.Description, err = nonEmpty(v)
		case "max_input_chars":
			p.MaxInputChars, err = positiveInt(v)
		case "max_output_tokens":
			p.MaxOutputTokens, err = positiveInt(v)
		case "temperature":
			var f float64
			f, err = strconv.ParseFloat(v, 64)
			if err != nil {
				err = fmt.Errorf("%q is not a number", v)
			} else if err = CheckTemperature(f); err == nil {
				p.Temperature = &f
			}
		default:
			return fmt.Errorf("line %d: unknown header key %q (known: %s; a file without a header block is used whole as the system prompt)",
				lineNo, k, strings.Join(headerKeys, ", "))
		}
		if err != nil {
			return fmt.Errorf("line %d: %s: %w", lineNo, k, err)
		}
	}
	return nil
}

func nonEmpty(v string) (string, error) {
	if v == "" {
		return "", errors.New("empty value")
	}
	return v, nil
}

func positiveInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not a whole number", v)
	}
	if n <= 0 {
		return 0, fmt.Errorf("%d is not positive", n)
	}
	return n, nil
}
