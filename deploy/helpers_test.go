package deploy

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
)

// root is the repository root, relative to this package's directory (the
// working directory of its tests).
const root = ".."

// repoPath returns the path of a file given relative to the repository
// root (an absolute path is returned as it is).
func repoPath(rel string) string {
	if filepath.IsAbs(rel) {
		return rel
	}
	return filepath.Join(root, filepath.FromSlash(rel))
}

func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(repoPath(rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// composeFile is the part of the compose file format that
// docker-compose.yml uses. Decoding is strict: a key this struct does not
// know (a typo such as depend_on) fails the test, so add a field here when
// the compose file starts using a new key.
type composeFile struct {
	Name     string             `yaml:"name"`
	Services map[string]service `yaml:"services"`
	// Extensions holds the top-level x-* keys (YAML anchors to merge).
	Extensions map[string]any `yaml:",inline"`
}

type service struct {
	Image           string         `yaml:"image"`
	Build           *build         `yaml:"build"`
	Hostname        string         `yaml:"hostname"`
	ContainerName   string         `yaml:"container_name"`
	Entrypoint      []string       `yaml:"entrypoint"`
	Command         []string       `yaml:"command"`
	Environment     map[string]any `yaml:"environment"`
	Ports           []string       `yaml:"ports"`
	Volumes         []string       `yaml:"volumes"`
	DependsOn       dependsOnMap   `yaml:"depends_on"`
	Healthcheck     *healthcheck   `yaml:"healthcheck"`
	Restart         string         `yaml:"restart"`
	StopGracePeriod string         `yaml:"stop_grace_period"`
}

type build struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

// dependsOn is an entry of depends_on.
type dependsOn struct {
	Condition string `yaml:"condition"`
}

// dependsOnMap is depends_on in either form: a list of service names
// (condition service_started) or a map of name to {condition}.
type dependsOnMap map[string]dependsOn

func (d *dependsOnMap) UnmarshalYAML(n *yaml.Node) error {
	*d = dependsOnMap{}
	switch n.Kind {
	case yaml.SequenceNode:
		var names []string
		if err := n.Decode(&names); err != nil {
			return err
		}
		for _, name := range names {
			(*d)[name] = dependsOn{Condition: "service_started"}
		}
		return nil
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			name, v := n.Content[i].Value, n.Content[i+1]
			if v.Kind != yaml.MappingNode {
				return fmt.Errorf("line %d: depends_on %s: want {condition: …}", v.Line, name)
			}
			var dep dependsOn
			for j := 0; j+1 < len(v.Content); j += 2 {
				switch k := v.Content[j].Value; k {
				case "condition":
					dep.Condition = v.Content[j+1].Value
				case "restart", "required":
				default:
					return fmt.Errorf("line %d: depends_on %s: unknown key %q", v.Content[j].Line, name, k)
				}
			}
			(*d)[name] = dep
		}
		return nil
	}
	return fmt.Errorf("line %d: depends_on: want a list or a map", n.Line)
}

type healthcheck struct {
	Test        []string `yaml:"test"`
	Interval    string   `yaml:"interval"`
	Timeout     string   `yaml:"timeout"`
	Retries     int      `yaml:"retries"`
	StartPeriod string   `yaml:"start_period"`
}

var loadCompose = sync.OnceValues(func() (*composeFile, error) {
	b, err := os.ReadFile(repoPath("docker-compose.yml"))
	if err != nil {
		return nil, err
	}
	return parseCompose(b)
})

func parseCompose(b []byte) (*composeFile, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var c composeFile
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("docker-compose.yml: %w", err)
	}
	for k := range c.Extensions {
		if !strings.HasPrefix(k, "x-") {
			return nil, fmt.Errorf("docker-compose.yml: unknown top-level key %q", k)
		}
	}
	return &c, nil
}

func compose(t *testing.T) *composeFile {
	t.Helper()
	c, err := loadCompose()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// svc returns the named service, failing the test if there is none.
func (c *composeFile) svc(t *testing.T, name string) service {
	t.Helper()
	s, ok := c.Services[name]
	if !ok {
		t.Fatalf("docker-compose.yml: no service %q", name)
	}
	return s
}

// env returns the service's environment as strings. Compose takes strings
// and numbers; a YAML boolean (true, no, off) is refused by some compose
// versions, so it fails the test: quote it.
func (s service) env(t *testing.T, svcName string) map[string]string {
	t.Helper()
	out := make(map[string]string, len(s.Environment))
	for k, v := range s.Environment {
		switch v := v.(type) {
		case string:
			out[k] = v
		case int:
			out[k] = strconv.Itoa(v)
		default:
			t.Errorf("docker-compose.yml: %s: environment %s is a YAML %T (%v): quote it", svcName, k, v, v)
			out[k] = fmt.Sprint(v)
		}
	}
	return out
}

// flags returns a command's -name=value arguments as a map (value "" for a
// bare -name), failing the test for an argument that is not a flag.
func commandFlags(t *testing.T, svcName string, cmd []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range cmd {
		if !strings.HasPrefix(a, "-") {
			t.Errorf("docker-compose.yml: %s: command argument %q is not a -flag (the example takes no arguments)", svcName, a)
			continue
		}
		name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if _, dup := out[name]; dup {
			t.Errorf("docker-compose.yml: %s: flag -%s given twice", svcName, name)
		}
		out[name] = value
	}
	return out
}

// readEnvFile reads KEY=value lines (scripts/versions.env): no quoting,
// no expansion, # comments.
func readEnvFile(t *testing.T, rel string) map[string]string {
	t.Helper()
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, rel)))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.ContainsAny(v, `"'$`) {
			t.Fatalf("%s:%d: want a plain KEY=value line, got %q", rel, n, line)
		}
		out[k] = v
	}
	return out
}

func versions(t *testing.T) map[string]string {
	t.Helper()
	v := readEnvFile(t, "scripts/versions.env")
	for _, k := range []string{"KAFKA_VERSION", "KAFKA_PORT", "KAFKA_CONTROLLER_PORT", "PG_PORT", "PG_DB", "PG_USER", "PG_PASSWORD"} {
		if v[k] == "" {
			t.Fatalf("scripts/versions.env: %s is not set", k)
		}
	}
	return v
}

// readProperties reads a Java properties file of key=value lines (no
// continuation lines or escapes, which server.properties does not use).
func readProperties(t *testing.T, rel string, replace map[string]string) map[string]string {
	t.Helper()
	text := string(readFile(t, rel))
	for k, v := range replace {
		text = strings.ReplaceAll(text, k, v)
	}
	out := map[string]string{}
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "!") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.HasSuffix(line, `\`) {
			t.Fatalf("%s:%d: cannot read %q", rel, n+1, line)
		}
		k = strings.TrimSpace(k)
		if _, dup := out[k]; dup {
			t.Fatalf("%s:%d: %s set twice", rel, n+1, k)
		}
		out[k] = strings.TrimSpace(v)
	}
	return out
}

// exampleConsts returns the string and integer constants declared at the
// top level of the example's non-test files (topic, partitions, group are
// in examples/thumbnails/main.go today; any file will do).
func exampleConsts(t *testing.T) map[string]string {
	t.Helper()
	const dir = "examples/thumbnails"
	files, err := filepath.Glob(repoPath(dir + "/*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok {
						continue
					}
					v := lit.Value
					if lit.Kind == token.STRING {
						if v, err = strconv.Unquote(v); err != nil {
							t.Fatal(err)
						}
					}
					out[name.Name] = v
				}
			}
		}
	}
	for _, k := range []string{"topic", "partitions", "group"} {
		if out[k] == "" {
			t.Fatalf("%s: no constant %q; the compose stack creates the example's topic and configures its group, so the test reads them from there", dir, k)
		}
	}
	return out
}

// bindMounts returns a service's volume entries that mount a path of the
// repository (those starting with ./), as host path (relative to the
// repository root) and container path.
func bindMounts(s service) (mounts [][2]string) {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || !strings.HasPrefix(parts[0], "./") {
			continue
		}
		mounts = append(mounts, [2]string{strings.TrimPrefix(parts[0], "./"), parts[1]})
	}
	return mounts
}

// hostPathOf returns the repository path mounted at containerPath in s, or
// "" if nothing is.
func hostPathOf(s service, containerPath string) string {
	for _, m := range bindMounts(s) {
		if m[1] == containerPath {
			return m[0]
		}
		if rest, ok := strings.CutPrefix(containerPath, m[1]+"/"); ok {
			return m[0] + "/" + rest
		}
	}
	return ""
}
