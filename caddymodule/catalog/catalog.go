// Package catalog holds the 27 text tools of caddy-textgen: their names, one-line descriptions and
// system prompts (embedded Markdown files under prompts/), the supported output languages and
// tones, and the assembly of the final system prompt for one request. It imports nothing from
// Caddy; the Caddy module reads it and applies the operator's per-tool overrides with With.
package catalog

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"sort"
	"strings"
	"sync"
)

//go:embed prompts/*.md
var promptFS embed.FS

// slugs are the 27 built-in tools in the order clients have always seen them. GET /api/v1/tools
// lists the tools in this order, so it is kept as a list rather than derived from the directory.
var slugs = [...]string{
	"email-writer",
	"summarizer",
	"cover-letter",
	"plc-explainer",
	"datasheet",
	"grammar-checker",
	"linkedin-post",
	"product-description",
	"code-explainer",
	"job-posting",
	"text-rewriter",
	"instagram-caption",
	"cv-generator",
	"contract-checker",
	"meeting-agenda",
	"keyword-generator",
	"regex-generator",
	"sql-generator",
	"bug-report",
	"product-review",
	"bewerbung-workflow",
	"signatur-generator",
	"vertrag-erklaerer",
	"reply-letter",
	"job-search",
	"brief-vereinfacher",
	"pdf-filler",
}

// Tool is one text tool. A zero MaxInputChars or MaxOutputTokens and a nil Temperature mean
// "use the handler's default". Tools handed out by a Catalog are shared: treat them as read-only.
type Tool struct {
	Slug        string // the value of the request's "tool" field
	Name        string // human-readable name
	Description string // one line, shown by GET /api/v1/tools
	System      string // the tool's system prompt, without language and tone instructions

	MaxInputChars   int      // maximum input in Unicode characters; 0: handler default
	MaxOutputTokens int      // maximum output tokens; 0: handler default
	Temperature     *float64 // sampling temperature; nil: handler (or model) default
}

// Catalog is an immutable, ordered set of tools. Derive changed copies with With.
type Catalog struct {
	tools  []*Tool
	bySlug map[string]*Tool
}

// Override replaces fields of one tool (see Catalog.With). A zero field means "unchanged".
type Override struct {
	Name        string // replaces the name; "": unchanged
	Description string // replaces the one-line description; "": unchanged
	System      string // replaces the system prompt; "": unchanged

	MaxInputChars   int      // > 0 replaces the maximum input; 0: unchanged
	MaxOutputTokens int      // > 0 replaces the maximum output tokens; 0: unchanged
	Temperature     *float64 // non-nil replaces the temperature (0 to 2); nil: unchanged
}

var defaultCatalog = sync.OnceValue(func() *Catalog {
	c, err := load(promptFS)
	if err != nil {
		// Only a broken build can get here; TestDefaultCatalogLoads proves the embedded files parse.
		panic("catalog: embedded prompts are broken: " + err.Error())
	}
	return c
})

// Default returns the built-in catalog of the 27 built-in tools, parsed once from the embedded prompt
// files. It is shared; derive changed copies with With.
func Default() *Catalog { return defaultCatalog() }

// load builds a catalog from prompts/<slug>.md for every built-in slug and rejects prompt files that
// belong to no slug, so a renamed file cannot silently drop a tool.
func load(fsys fs.FS) (*Catalog, error) {
	known := make(map[string]bool, len(slugs))
	c := &Catalog{tools: make([]*Tool, 0, len(slugs)), bySlug: make(map[string]*Tool, len(slugs))}
	for _, slug := range slugs {
		known[slug+".md"] = true
		name := "prompts/" + slug + ".md"
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		p, err := ParsePromptFile(data)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", name, err)
		}
		if p.Name == "" || p.Description == "" || !p.HasHeader {
			return nil, fmt.Errorf("parsing %s: the header must set name and description", name)
		}
		t := &Tool{
			Slug:            slug,
			Name:            p.Name,
			Description:     p.Description,
			System:          p.System,
			MaxInputChars:   p.MaxInputChars,
			MaxOutputTokens: p.MaxOutputTokens,
			Temperature:     p.Temperature,
		}
		c.tools = append(c.tools, t)
		c.bySlug[slug] = t
	}
	files, err := fs.Glob(fsys, "prompts/*.md")
	if err != nil {
		return nil, fmt.Errorf("listing prompts: %w", err)
	}
	var extra []string
	for _, f := range files {
		if !known[path.Base(f)] {
			extra = append(extra, f)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return nil, fmt.Errorf("prompt files for no built-in tool: %s", strings.Join(extra, ", "))
	}
	return c, nil
}

// Lookup returns the tool with the given slug (exact, case-sensitive match).
func (c *Catalog) Lookup(slug string) (*Tool, bool) {
	t, ok := c.bySlug[slug]
	return t, ok
}

// Slugs returns the tool slugs in catalog order (the built-in order of slugs for Default). The slice is a
// fresh copy.
func (c *Catalog) Slugs() []string {
	out := make([]string, len(c.tools))
	for i, t := range c.tools {
		out[i] = t.Slug
	}
	return out
}

// Tools returns the tools in catalog order. The slice is a fresh copy; the tools are shared and
// must not be modified.
func (c *Catalog) Tools() []*Tool {
	return append([]*Tool(nil), c.tools...)
}

// Len returns the number of tools.
func (c *Catalog) Len() int { return len(c.tools) }

// ErrUnknownTool is returned (wrapped) by With for a slug that is not in the catalog.
var ErrUnknownTool = errors.New("unknown tool")

// With returns a copy of c in which the tool slug has the non-zero fields of o. c itself and the
// tools it hands out are not changed. It fails for an unknown slug or an invalid value.
func (c *Catalog) With(slug string, o Override) (*Catalog, error) {
	old, ok := c.bySlug[slug]
	if !ok {
		return nil, fmt.Errorf("%w %q: the tools are %s", ErrUnknownTool, slug, strings.Join(c.Slugs(), ", "))
	}
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("tool %q: %w", slug, err)
	}
	t := *old
	if o.Name != "" {
		t.Name = strings.TrimSpace(o.Name)
	}
	if o.Description != "" {
		t.Description = strings.TrimSpace(o.Description)
	}
	if o.System != "" {
		t.System = strings.TrimSpace(o.System)
	}
	if o.MaxInputChars > 0 {
		t.MaxInputChars = o.MaxInputChars
	}
	if o.MaxOutputTokens > 0 {
		t.MaxOutputTokens = o.MaxOutputTokens
	}
	if o.Temperature != nil {
		v := *o.Temperature
		t.Temperature = &v
	}
	n := &Catalog{tools: make([]*Tool, len(c.tools)), bySlug: make(map[string]*Tool, len(c.bySlug))}
	for i, ct := range c.tools {
		if ct.Slug == slug {
			ct = &t
		}
		n.tools[i] = ct
		n.bySlug[ct.Slug] = ct
	}
	return n, nil
}

func (o Override) validate() error {
	if o.Name != "" && strings.TrimSpace(o.Name) == "" {
		return errors.New("name is blank")
	}
	if o.Name != "" && strings.ContainsAny(o.Name, "\r\n") {
		return errors.New("name must be one line")
	}
	if o.Description != "" && strings.TrimSpace(o.Description) == "" {
		return errors.New("description is blank")
	}
	if o.Description != "" && strings.ContainsAny(o.Description, "\r\n") {
		return errors.New("description must be one line")
	}
	if o.System != "" && strings.TrimSpace(o.System) == "" {
		return errors.New("system prompt is blank")
	}
	if o.MaxInputChars < 0 {
		return fmt.Errorf("max_input_chars %d is negative", o.MaxInputChars)
	}
	if o.MaxOutputTokens < 0 {
		return fmt.Errorf("max_output_tokens %d is negative", o.MaxOutputTokens)
	}
	if o.Temperature != nil {
		if err := CheckTemperature(*o.Temperature); err != nil {
			return err
		}
	}
	return nil
}

// MaxTemperature is the highest temperature accepted in prompt files and overrides.
const MaxTemperature = 2.0

// CheckTemperature accepts a sampling temperature from 0 to MaxTemperature (not NaN).
func CheckTemperature(v float64) error {
	if math.IsNaN(v) || v < 0 || v > MaxTemperature {
		return fmt.Errorf("temperature %v is outside 0 to %v", v, MaxTemperature)
	}
	return nil
}
