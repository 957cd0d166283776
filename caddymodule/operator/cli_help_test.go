package operator

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// textgenTree builds the registered `caddy textgen` command as caddycmd does, under a root
// named caddy.
func textgenTree(t *testing.T) (root, textgen *cobra.Command) {
	t.Helper()
	reg, ok := caddycmd.Commands()["textgen"]
	if !ok {
		t.Fatal("the textgen command is not registered")
	}
	textgen = &cobra.Command{Use: reg.Name + " " + reg.Usage, Short: reg.Short, Long: reg.Long}
	reg.CobraFunc(textgen)
	root = &cobra.Command{Use: "caddy"}
	root.AddCommand(textgen)
	return root, textgen
}

// commandRef is "caddy textgen" and the words after it that name a command (not flags,
// placeholders or punctuation).
var commandRef = regexp.MustCompile(`caddy textgen((?: [a-z][a-z-]*)*)`)

// checkRefs requires every "caddy textgen ..." in text to name a real command.
func checkRefs(t *testing.T, root *cobra.Command, where, text string) {
	t.Helper()
	for _, m := range commandRef.FindAllStringSubmatch(text, -1) {
		words := strings.Fields(m[1])
		cmd, rest, err := root.Find(append([]string{"textgen"}, words...))
		if err != nil || len(rest) > 0 || cmd.Name() != lastOr(words, "textgen") {
			t.Errorf("%s: %q names no command (found %q, left %q, %v)", where, m[0], cmd.CommandPath(), rest, err)
		}
	}
}

func lastOr(words []string, def string) string {
	if len(words) == 0 {
		return def
	}
	return words[len(words)-1]
}

// TestCLIHelpNamesRealCommands checks every help text against the command tree: the usage line
// lists the real commands, each group's summary names each of its subcommands, and every
// "caddy textgen ..." in the help, in the package's messages, in the README and in the manual
// (docs/*.md) is a command that exists.
func TestCLIHelpNamesRealCommands(t *testing.T) {
	root, tg := textgenTree(t)

	var children []string
	for _, c := range tg.Commands() {
		children = append(children, c.Name())
	}
	usage := regexp.MustCompile(`<([a-z|]+)>`).FindStringSubmatch(tg.Use)
	if usage == nil {
		t.Fatalf("the usage line %q does not list the commands", tg.Use)
	}
	listed := strings.Split(usage[1], "|")
	slices.Sort(listed)
	slices.Sort(children)
	if !slices.Equal(listed, children) {
		t.Errorf("the usage line lists %v; the commands are %v", listed, children)
	}

	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		where := c.CommandPath()
		for _, text := range []string{c.Use, c.Short, c.Long, c.Example} {
			checkRefs(t, root, where, text)
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) { checkRefs(t, root, where+" --"+f.Name, f.Usage) })
		if c != tg && c.HasSubCommands() {
			words := regexp.MustCompile(`[a-z-]+`).FindAllString(c.Short, -1)
			for _, sub := range c.Commands() {
				if !slices.Contains(words, sub.Name()) {
					t.Errorf("%s: the summary %q does not name its subcommand %q", where, c.Short, sub.Name())
				}
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(tg)

	// messages and hints in the code, the README and the manual (docs/OPERATING.md has the
	// operator guide; the other pages name commands too)
	files, _ := filepath.Glob("*.go")
	docs, _ := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if !slices.Contains(docs, filepath.Join("..", "..", "docs", "OPERATING.md")) {
		t.Fatalf("docs/OPERATING.md, the operator guide, is not among %v", docs)
	}
	files = append(files, filepath.Join("..", "..", "README.md"))
	files = append(files, docs...)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkRefs(t, root, f, string(b))
	}
}
