// Command releasecheck checks, before a tag and on every commit, that
// shareq's published modules work for a user exactly as the tree has
// them, and sets the version they require of each other.
//
// Run from the repository (any directory; it finds go.work):
//
//	releasecheck              the check (make release-check; make test runs it)
//	releasecheck -tidy        go mod tidy every module, published ones as below (make tidy)
//	releasecheck -set v0.2.0  make every requirement between our modules, and go.work's replace lines, name v0.2.0
//	releasecheck -tags        print the git tags that publish the version being prepared
//
// The version being prepared is the one that every requirement between
// our modules names (one for the whole set). The published modules are
// those of go.work outside internal/, examples/ and deploy/, and not
// under an internal directory; they must have no replace line and
// require no development module. go.work maps each of them, at that
// version, to its directory, which serves development.
//
// The check builds a file:// module proxy from the working tree (the
// files git would publish, each module zipped with golang.org/x/mod/zip)
// with every published module at that version. Then, with GOWORK=off, a
// throw-away module cache, GOPROXY=file://<the proxy>,<the usual
// proxy> and GONOSUMDB for our module path:
//
//   - every module is tidy on its own and passes go vet: a published one
//     resolves our other modules from the proxy, and tidies a copy of its
//     go.mod and go.sum, whose lines for our modules are left out (they
//     change with every commit, and nothing reads them); a development
//     module resolves them through its replace lines;
//   - from a new module outside the repository, go get fetches every
//     published module at the version, a program importing every
//     published package builds and runs, the quickstart builds and, run
//     against an in-process broker (kfake) named in $SHAREQ_BROKERS,
//     makes the thumbnail of a job enqueued for it and stops with status
//     0 when interrupted, and go install <module>/cmd/shareq@<version>
//     installs a shareq that prints its usage.
//
// Third-party modules come from the developer's module cache (read as a
// proxy), else from the usual GOPROXY. A failure names the module or
// step and prints the go command's output; the exit status is then 1.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "releasecheck:", err)
		}
		os.Exit(1)
	}
}

// run is releasecheck with its arguments and output.
func run(args []string, out io.Writer) error {
	fl := flag.NewFlagSet("releasecheck", flag.ContinueOnError)
	fl.SetOutput(out)
	root := fl.String("C", "", "the workspace `dir` (default: the go.work the go command finds)")
	set := fl.String("set", "", "set the `version` every requirement between our modules names, then stop")
	tidy := fl.Bool("tidy", false, "run go mod tidy in every module (published ones against the proxy), then stop")
	tags := fl.Bool("tags", false, "print the git tags that publish the version being prepared, then stop")
	keep := fl.Bool("keep", false, "keep the scratch directory (the proxy, the module cache, the user's module) and print its path")
	quickstart := fl.String("quickstart", "examples/quickstart", "the tree's `dir` of the quickstart a user copies (\"\" for none)")
	quickstartTimeout := fl.Duration("quickstart-timeout", quickstartTimeoutDefault, "bound on the quickstart's run: its start, its job and its graceful stop")
	install := fl.String("install", "cmd/shareq", "the comma-separated `dirs` of the commands a user installs with go install")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fl.Args())
	}
	if *root == "" {
		r, err := workspaceRoot()
		if err != nil {
			return err
		}
		*root = r
	}
	abs, err := filepath.Abs(*root)
	if err != nil {
		return err
	}
	ws, err := loadWorkspace(abs)
	if err != nil {
		return err
	}
	if *set != "" {
		return setVersion(ws, *set, out)
	}
	v, err := ws.version()
	if err != nil {
		return err
	}
	switch {
	case *tags:
		printTags(ws, v, out)
		return nil
	case *tidy:
		return withScratch(*keep, out, func(scratch string) error { return tidyAll(ws, v, scratch, out) })
	}
	var commands []string
	if *install != "" {
		commands = strings.Split(*install, ",")
	}
	return withScratch(*keep, out, func(scratch string) error {
		return check(ws, v, scratch, *quickstart, *quickstartTimeout, commands, out)
	})
}

// workspaceRoot returns the directory of the go.work the go command
// uses here.
func workspaceRoot() (string, error) {
	gowork, err := goEnv("GOWORK")
	if err != nil {
		return "", err
	}
	if gowork == "" || gowork == "off" {
		return "", errors.New("no go.work in use: run releasecheck inside the repository (not with GOWORK=off), or give -C")
	}
	return filepath.Dir(gowork), nil
}

// withScratch runs f with a new scratch directory, removed after it
// unless keep.
func withScratch(keep bool, out io.Writer, f func(scratch string) error) error {
	scratch, err := os.MkdirTemp("", "shareq-releasecheck-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Fprintln(out, "scratch directory (kept):", scratch)
	} else {
		defer os.RemoveAll(scratch)
	}
	return f(scratch)
}

// prepare builds the proxy of version v in scratch and returns the
// environment that reads our modules from it.
func prepare(ws *workspace, v, scratch string, out io.Writer) (env, error) {
	began := time.Now()
	proxy := filepath.Join(scratch, "proxy")
	if err := buildProxy(ws, proxy, v); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "proxy: %d published modules at %s in %s (%s)\n", len(ws.published()), v, proxy, since(began))
	return moduleEnv(ws.own, proxy, filepath.Join(scratch, "modcache"))
}

// check is the release check of version v.
func check(ws *workspace, v, scratch, quickstart string, quickstartTimeout time.Duration, commands []string, out io.Writer) error {
	e, err := prepare(ws, v, scratch, out)
	if err != nil {
		return err
	}
	var errs []error
	began := time.Now()
	for _, m := range ws.modules {
		if err := checkModule(ws, m, e, scratch, false); err != nil {
			errs = append(errs, fmt.Errorf("module %s (%s): %w", m.path, m.rel, err))
		}
	}
	fmt.Fprintf(out, "every module on its own, GOWORK=off (go mod tidy, go vet): %d modules (%s)\n", len(ws.modules), since(began))
	began = time.Now()
	if err := checkUser(ws, e, filepath.Join(scratch, "user"), v, quickstart, quickstartTimeout, commands); err != nil {
		errs = append(errs, err)
	}
	fmt.Fprintf(out, "as a user: go get of %d modules at %s, every published package built, %s, go install %s (%s)\n",
		len(ws.published()), v, quickstartStep(quickstart), strings.Join(commands, " "), since(began))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(out, "ok: the published modules at %s work from a module proxy as the tree has them\n", v)
	return nil
}

// tidyAll runs go mod tidy in every module.
func tidyAll(ws *workspace, v, scratch string, out io.Writer) error {
	e, err := prepare(ws, v, scratch, out)
	if err != nil {
		return err
	}
	for _, m := range ws.modules {
		if err := checkModule(ws, m, e, scratch, true); err != nil {
			return fmt.Errorf("module %s (%s): %w", m.path, m.rel, err)
		}
	}
	fmt.Fprintf(out, "tidy: %d modules\n", len(ws.modules))
	return nil
}

// quickstartStep names what the check did with the quickstart.
func quickstartStep(quickstart string) string {
	if quickstart == "" {
		return "no quickstart"
	}
	return quickstart + " built and run"
}

func since(t time.Time) time.Duration {
	return time.Since(t).Round(100 * time.Millisecond)
}
