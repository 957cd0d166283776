package catalog

import "strings"

// Parts of the language instruction; see BuildSystem.
const (
	langPrefix = "Language: write the whole answer, headings and labels included, in "
	langMiddle = " (language tag: "
	langSuffix = "), whatever the language of the input. Keep something in its original language " +
		"only where the instructions above say so (for example code, quotations or form field names)."
)

// BuildSystem returns the full system prompt for one request: the tool's prompt, the language
// instruction naming the language in words and by tag, and the tone instruction (or, with no or
// an unknown tone, the instruction to use the tone that fits the tool). langTag and langName are
// what LanguageMatcher.Match returned; an empty langName falls back to the tag. It allocates once.
func BuildSystem(t *Tool, langTag, langName, tone string) string {
	if langName == "" {
		langName = langTag
	}
	toneText := ToneInstruction(tone)
	var b strings.Builder
	b.Grow(len(t.System) + 2 + len(langPrefix) + len(langName) + len(langMiddle) + len(langTag) +
		len(langSuffix) + 1 + len(toneText))
	b.WriteString(t.System)
	b.WriteString("\n\n")
	b.WriteString(langPrefix)
	b.WriteString(langName)
	b.WriteString(langMiddle)
	b.WriteString(langTag)
	b.WriteString(langSuffix)
	b.WriteString("\n")
	b.WriteString(toneText)
	return b.String()
}
