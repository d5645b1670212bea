package modcheck

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// shareqPath is the root module's path; every shareq module's path
// starts with it.
const shareqPath = "github.com/shareq/shareq"

// unpublished are the directories whose modules a user never imports.
var unpublished = []string{"internal", "cmd", "examples", "deploy"}

// A block is one of the installing guide's go.mod blocks.
type block struct {
	line     int               // the guide's line of its opening fence
	module   string            // the module it is for
	text     string            // its lines but the first
	replaced map[string]string // module path -> the directory under ../shareq ("" for the root)
}

var (
	forLine     = regexp.MustCompile(`^// for (\S+?):?(\s|$)`)
	replaceLine = regexp.MustCompile(`^(?:replace\s+)?(` + regexp.QuoteMeta(shareqPath) + `\S*)\s+=>\s+\.\./shareq(/\S+)?$`)
	shareqMod   = regexp.MustCompile(regexp.QuoteMeta(shareqPath) + `(/[A-Za-z0-9_./-]*[A-Za-z0-9_])?`)
)

// installing is the guide that tells users how to use shareq from their
// own module and how to install the CLI.
const installing = "docs/installing.md"

// guide returns the lines of the installing guide.
func guide(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(installing)))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}

// blocks returns the installing guide's go.mod blocks by the module they
// are for.
func blocks(t *testing.T) map[string]block {
	t.Helper()
	out := map[string]block{}
	lines := guide(t)
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go.mod" {
			continue
		}
		b := block{line: i + 1, replaced: map[string]string{}}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		if len(body) == 0 {
			t.Fatalf("%s:%d: empty go.mod block", installing, b.line)
		}
		m := forLine.FindStringSubmatch(body[0])
		if m == nil {
			t.Fatalf("%s:%d: a go.mod block must start with // for <module>; it starts %q", installing, b.line, body[0])
		}
		b.module = m[1]
		b.text = strings.Join(body[1:], "\n") + "\n"
		for _, l := range body[1:] {
			if m := replaceLine.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
				b.replaced[m[1]] = strings.TrimPrefix(m[2], "/")
			}
		}
		if _, dup := out[b.module]; dup {
			t.Fatalf("%s:%d: a second go.mod block for %s", installing, b.line, b.module)
		}
		out[b.module] = b
	}
	return out
}

// goCmd runs the go command in dir with env added to the environment,
// and returns its combined output.
func goCmd(t *testing.T, dir string, env []string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	return cmd.CombinedOutput()
}

// proxyOnly is GOPROXY without its "direct" entries, so that a module
// missing from the guide fails at the proxy instead of being looked
// for in a repository that does not exist.
func proxyOnly(t *testing.T) string {
	t.Helper()
	out, err := goCmd(t, root, nil, "env", "GOPROXY")
	if err != nil {
		t.Fatalf("go env GOPROXY: %v\n%s", err, out)
	}
	var keep []string
	for _, p := range strings.FieldsFunc(strings.TrimSpace(string(out)), func(r rune) bool { return r == ',' || r == '|' }) {
		if p != "direct" {
			keep = append(keep, p)
		}
	}
	if len(keep) == 0 {
		return "off"
	}
	return strings.Join(keep, ",")
}

// A published module of the repository.
type module struct {
	path, dir string // dir relative to the root
}

// published returns the modules of go.work a user may import, and the
// paths of all of go.work's modules.
func published(t *testing.T) ([]module, []string) {
	t.Helper()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	// go.work's modules, also when the test runs with GOWORK=off.
	out, err := goCmd(t, root, []string{"GOWORK=" + filepath.Join(abs, "go.work")}, "list", "-m", "-f", "{{.Path}} {{.Dir}}")
	if err != nil {
		t.Fatalf("go list -m: %v\n%s", err, out)
	}
	var (
		mods []module
		all  []string
	)
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, dir, _ := strings.Cut(l, " ")
		all = append(all, path)
		rel, err := filepath.Rel(abs, dir)
		if err != nil {
			t.Fatal(err)
		}
		rel = filepath.ToSlash(rel)
		// A module under an internal directory (a module's own test
		// module) is as unimportable as its packages.
		if slices.Contains(unpublished, strings.Split(rel, "/")[0]) || slices.Contains(strings.Split(rel, "/"), "internal") {
			continue
		}
		mods = append(mods, module{path: path, dir: rel})
	}
	if len(mods) < 2 {
		t.Fatalf("only %d published modules in go.work: %v", len(mods), mods)
	}
	return mods, all
}

// packages returns the importable packages of the module in dir: not
// main, not internal.
func packages(t *testing.T, dir string) []string {
	t.Helper()
	out, err := goCmd(t, filepath.Join(root, dir), []string{"GOWORK=off"}, "list", "-f", "{{.Name}} {{.ImportPath}}", "./...")
	if err != nil {
		t.Fatalf("go list ./... in %s: %v\n%s", dir, err, out)
	}
	var pkgs []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, path, _ := strings.Cut(l, " ")
		if name == "main" || strings.Contains(path+"/", "/internal/") {
			continue
		}
		pkgs = append(pkgs, path)
	}
	return pkgs
}

// TestGuideReplaceLines builds, for each published module, a module of
// a user outside the repository with only the installing guide's replace
// lines for it, and fails if go mod tidy or go build needs more, or if a
// line is not needed.
func TestGuideReplaceLines(t *testing.T) {
	t.Parallel()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	proxy := proxyOnly(t)
	bs := blocks(t)
	mods, all := published(t)
	for _, m := range mods {
		if _, ok := bs[m.path]; !ok {
			t.Errorf("%s has no go.mod block for %s: add one under \"Using shareq from your own module\", starting // for %s", installing, m.path, m.path)
		}
	}
	for path := range bs {
		if !slices.ContainsFunc(mods, func(m module) bool { return m.path == path }) {
			t.Errorf("%s has a go.mod block for %s, which is not a published module of go.work", installing, path)
		}
	}
	for _, m := range mods {
		b, ok := bs[m.path]
		if !ok {
			continue
		}
		t.Run(strings.TrimPrefix(strings.TrimPrefix(m.path, shareqPath), "/"), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir() // outside the repository: no go.work above it
			gomod := "module example.com/shareqapp\n\ngo 1.26.0\n\n" +
				strings.ReplaceAll(b.text, "=> ../shareq", "=> "+filepath.ToSlash(abs))
			var main strings.Builder
			main.WriteString("package main\n\nimport (\n")
			pkgs := packages(t, m.dir)
			for _, p := range pkgs {
				fmt.Fprintf(&main, "\t_ %q\n", p)
			}
			main.WriteString(")\n\nfunc main() {}\n")
			write(t, filepath.Join(dir, "go.mod"), gomod)
			write(t, filepath.Join(dir, "main.go"), main.String())
			// The module's own go.sum: tidy then needs the proxy only for
			// what the module's tests do not already pin.
			if sum, err := os.ReadFile(filepath.Join(root, m.dir, "go.sum")); err == nil {
				write(t, filepath.Join(dir, "go.sum"), string(sum))
			}
			env := []string{"GOWORK=off", "GOPROXY=" + proxy, "GOFLAGS=-mod=mod", "GIT_TERMINAL_PROMPT=0"}
			for _, args := range [][]string{{"mod", "tidy"}, {"build", "-o", os.DevNull, "."}} {
				out, err := goCmd(t, dir, env, args...)
				if err != nil {
					t.Fatalf("%s:%d, the go.mod block for %s: go %s, in a module importing %s, fails: %v\n%s\n%s",
						installing, b.line, m.path, strings.Join(args, " "), strings.Join(pkgs, ", "), err, missing(b, out, all), out)
				}
			}
			out, err := goCmd(t, dir, env, "list", "-m", "-f", "{{.Path}}", "all")
			if err != nil {
				t.Fatalf("go list -m all: %v\n%s", err, out)
			}
			inBuild := strings.Fields(string(out))
			for path := range b.replaced {
				if !slices.Contains(inBuild, path) {
					t.Errorf("%s:%d, the go.mod block for %s: the line for %s is not needed (the module is not in go list -m all); remove it", installing, b.line, m.path, path)
				}
			}
		})
	}
}

// missing names the replace lines that the go command's output says b
// lacks: the repository's modules (all, the internal ones among them)
// that it mentions and b does not replace.
func missing(b block, out []byte, all []string) string {
	var lines []string
	for _, path := range shareqMod.FindAllString(string(out), -1) {
		if _, ok := b.replaced[path]; ok || !slices.Contains(all, path) {
			continue
		}
		line := "\t" + path + " => ../shareq" + strings.TrimPrefix(path, shareqPath)
		if !slices.Contains(lines, line) {
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		return "(the output names no shareq module the block lacks)"
	}
	return "the block lacks these lines (or the module requires a shareq module it should not):\n" + strings.Join(lines, "\n")
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGuideInstallCommands runs the installing guide's commands that install the
// CLI from the clone, each into a directory of its own, and the shareq
// each installs.
func TestGuideInstallCommands(t *testing.T) {
	t.Parallel()
	cmds := installCommands(t)
	if len(cmds) < 2 {
		t.Fatalf("%s's install block has %d commands, want the one with go.work and the one without", installing, len(cmds))
	}
	for _, c := range cmds {
		t.Run(c, func(t *testing.T) {
			t.Parallel()
			bin := t.TempDir()
			cmd := exec.Command("sh", "-c", c)
			cmd.Dir = root
			// GOWORK unset: go.work is found as a user's clone finds it.
			cmd.Env = append(withoutEnv(os.Environ(), "GOWORK"), "GOBIN="+bin)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s's %q fails: %v\n%s", installing, c, err, out)
			}
			var stderr bytes.Buffer
			run := exec.Command(filepath.Join(bin, "shareq"), "help")
			run.Stderr = &stderr
			_ = run.Run() // usage exits 2
			if !strings.Contains(stderr.String(), "usage: shareq") {
				t.Fatalf("the shareq that %q installed printed %q for help, want its usage", c, stderr.String())
			}
		})
	}
}

// installCommands returns the commands of the sh block under the
// installing guide's "## Installing the CLI", comments removed.
func installCommands(t *testing.T) []string {
	t.Helper()
	lines := guide(t)
	i := slices.Index(lines, "## Installing the CLI")
	if i < 0 {
		t.Fatalf("%s has no \"## Installing the CLI\" section", installing)
	}
	for ; i < len(lines) && lines[i] != "```sh"; i++ {
	}
	var cmds []string
	sc := bufio.NewScanner(strings.NewReader(strings.Join(lines[min(i+1, len(lines)):], "\n")))
	for sc.Scan() && sc.Text() != "```" {
		c, _, _ := strings.Cut(sc.Text(), "#")
		if c = strings.TrimSpace(c); c != "" {
			cmds = append(cmds, c)
		}
	}
	return cmds
}

func withoutEnv(env []string, name string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
}
