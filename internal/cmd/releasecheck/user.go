package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// checkUser does what a user does with version v of the published
// modules, in a new module outside the repository (dir) with the
// environment e (moduleEnv): go get each published module, build and
// run a program importing every package they publish, build the
// quickstart (quickstart, a directory of the tree's main package; "" for
// none) and run it against an in-process broker (runQuickstart, within
// quickstartTimeout), and go install each command at v and run it with
// "help". A
// failure names the module or command and carries the go command's
// output.
func checkUser(ws *workspace, e env, dir, v, quickstart string, quickstartTimeout time.Duration, commands []string) error {
	app := filepath.Join(dir, "app")
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(app, 0o755); err != nil {
		return err
	}
	gomod := fmt.Sprintf("module example.com/shareqapp\n\ngo %s\n", ws.goLine)
	if err := os.WriteFile(filepath.Join(app, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	for _, m := range ws.published() {
		if _, err := goCmd(app, e, "get", m.path+"@"+v); err != nil {
			return &userError{what: "go get " + m.path + "@" + v, err: err}
		}
	}
	pkgs, err := publicPackages(ws, app, e)
	if err != nil {
		return err
	}
	var src strings.Builder
	src.WriteString("// Command app imports every package of shareq's published modules.\npackage main\n\nimport (\n")
	for _, p := range pkgs {
		fmt.Fprintf(&src, "\t_ %q\n", p)
	}
	src.WriteString(")\n\nfunc main() {}\n")
	if err := os.WriteFile(filepath.Join(app, "main.go"), []byte(src.String()), 0o644); err != nil {
		return err
	}
	if _, err := goCmd(app, e, "build", "-o", filepath.Join(bin, "app"), "."); err != nil {
		return &userError{what: fmt.Sprintf("a program importing the %d published packages", len(pkgs)), err: err}
	}
	if out, err := exec.Command(filepath.Join(bin, "app")).CombinedOutput(); err != nil {
		return &userError{what: "the program importing every published package (its package initialisation)", err: fmt.Errorf("%v\n%s", err, out)}
	}
	if quickstart != "" {
		if err := buildQuickstart(ws, app, e, quickstart, bin); err != nil {
			return err
		}
		if err := runQuickstart(filepath.Join(bin, path.Base(quickstart)), quickstartTimeout); err != nil {
			return &userError{what: "the quickstart (" + quickstart + ") run against an in-process broker", err: err}
		}
	}
	for _, c := range commands {
		if err := installCommand(ws, dir, e, c, v, bin); err != nil {
			return err
		}
	}
	return nil
}

// publicPackages lists the packages of our modules in app's build that
// a user can import: not internal, not commands. (-e: an internal
// package of a test may need modules a user's build does not have.)
func publicPackages(ws *workspace, app string, e env) ([]string, error) {
	out, err := goCmd(app, e, "list", "-e", "-f", "{{.Name}} {{.ImportPath}}", ws.own+"/...")
	if err != nil {
		return nil, &userError{what: "go list " + ws.own + "/...", err: err}
	}
	var pkgs []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, p, _ := strings.Cut(l, " ")
		if name == "main" || slices.Contains(strings.Split(p, "/"), "internal") {
			continue
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		return nil, &userError{what: "go list " + ws.own + "/...", err: fmt.Errorf("no importable package:\n%s", out)}
	}
	return pkgs, nil
}

// buildQuickstart copies the Go files of the tree's quickstart (rel, a
// directory) into app and builds them there, as a user who copies it.
func buildQuickstart(ws *workspace, app string, e env, rel, bin string) error {
	src := filepath.Join(ws.root, filepath.FromSlash(rel))
	dst := filepath.Join(app, path.Base(rel))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	names, err := filepath.Glob(filepath.Join(src, "*.go"))
	if err != nil {
		return err
	}
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		b, err := os.ReadFile(n)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(n)), b, 0o644); err != nil {
			return err
		}
	}
	if _, err := goCmd(app, e, "build", "-o", filepath.Join(bin, path.Base(rel)), "./"+path.Base(rel)); err != nil {
		return &userError{what: "the quickstart (" + rel + ") in a module of its own", err: err}
	}
	return nil
}

// installCommand runs go install <own>/<rel>@v outside any module, as a
// user installs the command, and runs the installed binary with "help",
// which must print its usage.
func installCommand(ws *workspace, dir string, e env, rel, v, bin string) error {
	pkg := ws.own + "/" + rel + "@" + v
	if _, err := goCmd(dir, append(e, "GOBIN="+bin), "install", pkg); err != nil {
		return &userError{what: "go install " + pkg, err: err}
	}
	name := path.Base(rel)
	out, _ := exec.Command(filepath.Join(bin, name), "help").CombinedOutput() // usage may exit non-zero
	if !bytes.Contains(out, []byte("usage: "+name)) {
		return &userError{what: "the " + name + " that go install " + pkg + " installed", err: fmt.Errorf("%s help printed %q, want its usage", name, out)}
	}
	return nil
}

// A userError is a step of a user's that failed.
type userError struct {
	what string
	err  error
}

func (e *userError) Error() string {
	return fmt.Sprintf("as a user, in a new module outside the repository: %s: %v", e.what, e.err)
}

func (e *userError) Unwrap() error { return e.err }
