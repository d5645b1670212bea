package deploy

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// exampleFlags builds examples/thumbnails as examples/thumbnails/Dockerfile
// does (the examples module without go.work, CGO_ENABLED=0) and reads its flags from -h: name → whether it
// takes a value.
func exampleFlags(t *testing.T) map[string]bool {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command: cannot build the example")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "thumbnails")
	build := exec.CommandContext(ctx, goBin, "-C", "examples", "build", "-o", bin, "./thumbnails")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("GOWORK=off CGO_ENABLED=0 go -C examples build ./thumbnails (as the Dockerfile does): %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, bin, "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("thumbnails -h: %v\n%s", err, out)
	}
	// flag.PrintDefaults: "  -name" for a boolean, "  -name type" else.
	flags := map[string]bool{}
	re := regexp.MustCompile(`^  -([A-Za-z0-9][\w.-]*)( \S+)?$`)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			flags[m[1]] = m[2] != ""
		}
	}
	if len(flags) == 0 {
		t.Fatalf("no flags in the output of thumbnails -h:\n%s", out)
	}
	return flags
}

// TestExampleCommands checks the worker's and producer's commands against
// the flags the example defines, and the services' other settings.
func TestExampleCommands(t *testing.T) {
	c := compose(t)
	defined := exampleFlags(t)
	for _, name := range []string{"worker", "producer"} {
		s := c.svc(t, name)
		for _, a := range s.Command {
			flagName, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			takesValue, ok := defined[flagName]
			switch {
			case !ok:
				t.Errorf("%s: command has -%s, which examples/thumbnails does not define", name, flagName)
			case takesValue && !hasValue:
				t.Errorf("%s: give -%s its value as -%s=value", name, flagName, flagName)
			}
		}
	}

	worker, producer := c.svc(t, "worker"), c.svc(t, "producer")
	wf := commandFlags(t, "worker", worker.Command)
	pf := commandFlags(t, "producer", producer.Command)
	if _, ok := wf["work-only"]; !ok {
		t.Error("worker: command lacks -work-only")
	}
	if _, ok := pf["produce-only"]; !ok {
		t.Error("producer: command lacks -produce-only")
	}
	if pf["jobs"] == "" {
		t.Error("producer: command lacks -jobs=N")
	}

	// Scaling: replicas need distinct names and no fixed host port.
	if worker.ContainerName != "" || len(worker.Ports) > 0 {
		t.Errorf("worker: container_name %q, ports %q: neither may be set, or --scale worker=N fails", worker.ContainerName, worker.Ports)
	}
	for dep, want := range map[string]string{"kafka-init": "service_completed_successfully", "postgres": "service_healthy"} {
		if got := worker.DependsOn[dep].Condition; got != want {
			t.Errorf("worker: depends_on %s condition %q, want %s", dep, got, want)
		}
	}
	if got := producer.DependsOn["kafka-init"].Condition; got != "service_completed_successfully" {
		t.Errorf("producer: depends_on kafka-init condition %q, want service_completed_successfully", got)
	}
	if producer.Restart != "no" {
		t.Errorf(`producer: restart %q, want "no": it produces once and exits`, producer.Restart)
	}
	if worker.Image != producer.Image || worker.Build == nil {
		t.Errorf("worker and producer should run the one image built from the Dockerfile (images %q, %q)", worker.Image, producer.Image)
	}

	// With -database the worker owns the schema (see TestPostgres).
	if _, ok := wf["database"]; ok && !strings.Contains(exampleSource(t), "migrations.Up(") {
		t.Error("examples/thumbnails never calls migrations.Up: docker-compose.yml relies on the worker to create the schema")
	}
}

// exampleSource returns the example's non-test Go files, concatenated.
func exampleSource(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob(repoPath("examples/thumbnails/*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(src)
	}
	return b.String()
}

// TestDockerfile checks examples/thumbnails/Dockerfile: a Go build image of
// go.mod's Go version, a static build of the example, and a runtime stage
// that runs it as a non-root user.
func TestDockerfile(t *testing.T) {
	c := compose(t)
	b := c.svc(t, "worker").Build
	if b == nil {
		t.Fatal("worker: no build section")
	}
	if filepath.Clean(b.Context) != "." {
		t.Errorf("worker: build context %q, want the repository root (it holds go.mod)", b.Context)
	}
	rel := path.Join(b.Context, b.Dockerfile)
	df := string(readFile(t, rel))

	goLine := regexp.MustCompile(`(?m)^go (([0-9]+\.[0-9]+)(\.[0-9]+)?)$`).FindStringSubmatch(string(readFile(t, "go.mod")))
	if goLine == nil {
		t.Fatal("go.mod: no go directive")
	}
	goMinor := goLine[2]
	var froms []string
	for _, m := range regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(df, -1) {
		froms = append(froms, m[1])
	}
	if len(froms) < 2 || froms[0] != "golang:"+goMinor {
		t.Errorf("%s: stages %q, want a golang:%s build stage (go.mod says go %s) and a runtime stage", rel, froms, goMinor, goLine[1])
	}
	build := regexp.MustCompile(`(?s)RUN [^\n]*(?:\\\n[^\n]*)*go -C examples build[^\n]*`).FindString(df)
	if !strings.Contains(build, "CGO_ENABLED=0") || !strings.Contains(build, "GOWORK=off") || !strings.HasSuffix(build, " ./thumbnails") {
		t.Errorf("%s: want a RUN of GOWORK=off CGO_ENABLED=0 go -C examples build … ./thumbnails (the examples module, without go.work), got %q", rel, build)
	}

	final := df[strings.LastIndex(df, "\nFROM "):]
	user := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindStringSubmatch(final)
	if user == nil || user[1] == "root" || strings.HasPrefix(user[1], "0:") || user[1] == "0" {
		t.Errorf("%s: the runtime stage must set a non-root USER, got %v", rel, user)
	}
	if !regexp.MustCompile(`(?m)^ENTRYPOINT \[`).MatchString(final) {
		t.Errorf("%s: the runtime stage needs an exec-form ENTRYPOINT (the compose commands are its arguments)", rel)
	}
	if addr := commandFlags(t, "worker", c.svc(t, "worker").Command)["metrics-addr"]; addr != "" {
		if _, port, _ := strings.Cut(addr, ":"); !regexp.MustCompile(`(?m)^EXPOSE ` + port + `$`).MatchString(final) {
			t.Errorf("%s: the runtime stage should EXPOSE %s, the worker's -metrics-addr port", rel, port)
		}
	}
}

// TestDockerignore checks that .dockerignore keeps the large local
// directories out of the build context and keeps in every file the build
// needs: the go.mod and go.sum of every shareq module the example's module
// builds with, and the Go and embedded files of every package of theirs
// that the example imports, listed as the Dockerfile builds (the examples
// module, GOWORK=off).
func TestDockerignore(t *testing.T) {
	patterns := dockerignorePatterns(t)
	for _, p := range []string{".git", ".cache", ".cache/kafka-4.3.1/libs/x.jar"} {
		if !ignored(patterns, p) {
			t.Errorf(".dockerignore does not leave out %s", p)
		}
	}
	var need []string
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command: cannot list the example's packages")
	}
	cmd := exec.Command(goBin, "list", "-deps", "-f",
		`{{if .Module}}{{.Module.Dir}}|{{.Dir}}|{{join .GoFiles ","}}|{{join .EmbedFiles ","}}{{end}}`,
		"./thumbnails")
	cmd.Dir = filepath.Join(root, "examples")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	// inRepo returns p relative to the repository, or false for a
	// directory outside it (the module cache).
	inRepo := func(p string) (string, bool) {
		rel, err := filepath.Rel(abs, p)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return "", false
		}
		return filepath.ToSlash(rel), true
	}
	modules := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.Split(line, "|")
		if len(parts) != 4 {
			continue
		}
		mod, ok := inRepo(parts[0])
		if !ok {
			continue
		}
		if !modules[mod] {
			modules[mod] = true
			need = append(need, path.Join(mod, "go.mod"), path.Join(mod, "go.sum"))
		}
		dir, _ := inRepo(parts[1])
		for _, f := range append(strings.Split(parts[2], ","), strings.Split(parts[3], ",")...) {
			if f != "" {
				need = append(need, path.Join(dir, f))
			}
		}
	}
	if !modules["."] || !modules["examples"] {
		t.Fatalf("go list found the modules %v, want the root and examples among them", modules)
	}
	if len(need) < 10 {
		t.Fatalf("go list found only %q", need)
	}
	for _, p := range need {
		if ignored(patterns, p) {
			t.Errorf(".dockerignore leaves out %s, which the image build needs", p)
		}
	}
}

func dockerignorePatterns(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(string(readFile(t, ".dockerignore")), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			t.Fatalf(".dockerignore: exceptions (%s) are not understood by this test; teach ignored about them", line)
		}
		out = append(out, path.Clean(strings.TrimPrefix(line, "/")))
	}
	return out
}

// ignored reports whether .dockerignore patterns leave out the file p
// (slash-separated, relative to the context): a pattern matches the path
// or one of its parent directories; a leading **/ matches at any depth.
// It covers the patterns .dockerignore uses, not all of Docker's syntax.
func ignored(patterns []string, p string) bool {
	segs := strings.Split(p, "/")
	for _, pat := range patterns {
		anyDepth := strings.HasPrefix(pat, "**/")
		pat = strings.TrimPrefix(pat, "**/")
		for i := range segs {
			starts := []int{0}
			if anyDepth {
				starts = make([]int, i+1)
				for j := range starts {
					starts[j] = j
				}
			}
			for _, s := range starts {
				if ok, _ := path.Match(pat, strings.Join(segs[s:i+1], "/")); ok {
					return true
				}
			}
		}
	}
	return false
}

func TestIgnored(t *testing.T) {
	pats := []string{".git", "*.test", "deploy", "**/Dockerfile"}
	for p, want := range map[string]bool{
		".git/config":                    true,
		"worker/worker.test":             false, // *.test matches at the root only
		"x.test":                         true,
		"deploy/kafka/init.sh":           true,
		"examples/thumbnails/Dockerfile": true,
		"examples/thumbnails/main.go":    false,
		"go.mod":                         false,
	} {
		if got := ignored(pats, p); got != want {
			t.Errorf("ignored(%s) = %v, want %v", p, got, want)
		}
	}
}
