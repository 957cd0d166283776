package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// composeFile is what the test reads of deploy/compose/compose.yaml.
type composeFile struct {
	Services map[string]struct {
		Image string `yaml:"image"`
		Build *struct {
			Context string `yaml:"context"`
		} `yaml:"build"`
		Ports       []string          `yaml:"ports"`
		Volumes     []string          `yaml:"volumes"`
		Environment map[string]string `yaml:"environment"`
		DependsOn   []string          `yaml:"depends_on"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// composeVar matches ${NAME}, ${NAME:-default}, ${NAME:?message} in a compose file.
var composeVar = regexp.MustCompile(`\$\{([A-Z0-9_]+)`)

// caddyVersion is the Caddy version go.mod requires (without the v).
func caddyVersion(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`github\.com/caddyserver/caddy/v2 v(\S+)`).FindSubmatch(raw)
	if m == nil {
		t.Fatal("go.mod requires no github.com/caddyserver/caddy/v2")
	}
	return string(m[1])
}

// TestComposeFile parses the compose file of the scaled deployment (YAML, its anchors merged)
// and checks that it is what docs/DEPLOYING.md says: two caddy-textgen instances built from the
// repository's Dockerfile behind a Caddy load balancer, PostgreSQL, Redis and Ollama on pinned
// images, only the load balancer's ports published, every Caddyfile it mounts present, and
// every image, port and variable it names listed in the docs (variables also in example.env).
func TestComposeFile(t *testing.T) {
	raw, err := os.ReadFile("compose/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	docs, err := os.ReadFile("../docs/DEPLOYING.md")
	if err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile("compose/example.env")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range c.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	if strings.Join(names, " ") != "lb ollama postgres redis textgen1 textgen2" {
		t.Fatalf("services %v", names)
	}
	version := caddyVersion(t)
	if img := c.Services["lb"].Image; img != "caddy:"+version {
		t.Errorf("the load balancer runs %q, want caddy:%s (go.mod's Caddy)", img, version)
	}
	dockerfile, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dockerfile), "ARG CADDY_VERSION="+version+"\n") {
		t.Errorf("the Dockerfile does not build Caddy %s (go.mod's)", version)
	}
	for _, n := range []string{"textgen1", "textgen2"} {
		s := c.Services[n]
		if s.Build == nil || filepath.Clean(filepath.Join("compose", s.Build.Context)) != ".." {
			t.Errorf("%s is not built from the repository's Dockerfile: %+v", n, s.Build)
		}
		if len(s.Ports) > 0 {
			t.Errorf("%s publishes %v: only the load balancer is reachable", n, s.Ports)
		}
		for _, v := range []string{"TEXTGEN_DATABASE_URL", "TEXTGEN_REDIS_URL", "OLLAMA_HOST", "TEXTGEN_RETENTION_KEY", "TEXTGEN_MAIL_KEY"} {
			if s.Environment[v] == "" {
				t.Errorf("%s: no %s", n, v)
			}
		}
		if len(s.DependsOn) == 0 {
			t.Errorf("%s depends on nothing", n)
		}
	}
	for n, s := range c.Services {
		if n != "lb" && len(s.Ports) > 0 {
			t.Errorf("%s publishes %v", n, s.Ports)
		}
		if s.Image == "" || strings.HasSuffix(s.Image, ":latest") || !strings.Contains(s.Image, ":") {
			t.Errorf("%s: image %q is not pinned to a version", n, s.Image)
		}
		if n != "textgen1" && n != "textgen2" && !strings.Contains(string(docs), "`"+s.Image+"`") {
			t.Errorf("docs/DEPLOYING.md does not name the image %s", s.Image)
		}
		for _, p := range s.Ports {
			host, _, _ := strings.Cut(p, ":")
			if !strings.Contains(string(docs), "port "+host) && !strings.Contains(string(docs), "ports "+host) && !strings.Contains(string(docs), " "+host+" ") {
				t.Errorf("docs/DEPLOYING.md does not name the port %s", host)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, "./") {
				if _, err := os.Stat(filepath.Join("compose", src)); err != nil {
					t.Errorf("%s mounts %s: %v", n, src, err)
				}
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("%s mounts the undeclared volume %s", n, src)
			}
		}
	}
	for _, m := range composeVar.FindAllStringSubmatch(string(raw), -1) {
		v := m[1]
		if !strings.Contains(string(docs), "`"+v+"`") {
			t.Errorf("docs/DEPLOYING.md does not list the variable %s", v)
		}
		if !regexp.MustCompile(`(?m)^` + v + `=`).Match(env) {
			t.Errorf("compose/example.env does not list the variable %s", v)
		}
	}
}
