package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// loadWithCompose loads content as `docker compose` does (compose-go's
// loader, with its schema validation and normalization), from the
// repository root, and returns the project or the loader's error.
func loadWithCompose(t *testing.T, content []byte) (*types.Project, error) {
	t.Helper()
	dir, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	return loader.LoadWithContext(t.Context(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "docker-compose.yml"), Content: content}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.SetProjectName("shareq", true) })
}

// TestComposeLoads loads docker-compose.yml with the loader docker
// compose itself uses: a file compose would refuse fails here.
func TestComposeLoads(t *testing.T) {
	t.Parallel()
	content, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := loadWithCompose(t, content)
	if err != nil {
		t.Fatalf("compose refuses docker-compose.yml: %v", err)
	}
	names := p.ServiceNames()
	for _, want := range []string{"kafka", "kafka-init", "postgres", "worker", "producer", "prometheus", "grafana", "jaeger"} {
		if !slices.Contains(names, want) {
			t.Errorf("services %v: no %s", names, want)
		}
	}
	if w := p.Services["worker"]; !slices.Contains(w.Command, "-otlp=http://jaeger:4318") {
		t.Errorf("worker command %q: does not export to the jaeger service", w.Command)
	}
}

// The loader refuses what compose refuses: an unknown key, a
// dependency on a service that does not exist.
func TestComposeLoaderRefuses(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ file, want string }{
		"unknown key":     {"services:\n  a:\n    image: x\n    depend_on: [b]\n", "depend_on"},
		"missing service": {"services:\n  a:\n    image: x\n    depends_on: [b]\n", "b"},
		"bad port":        {"services:\n  a:\n    image: x\n    ports: [\"127.0.0.1:x:1\"]\n", "hostPort"},
	} {
		if _, err := loadWithCompose(t, []byte(tc.file)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: loader error %v, want one naming %q", name, err, tc.want)
		}
	}
}
