package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

// workspaceRoot returns the directory of the go.work that the go command
// uses in dir, so that the API read is the same from any directory of
// the repository.
func workspaceRoot(dir string) (string, error) {
	cmd := exec.Command("go", "env", "GOWORK")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env GOWORK: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	gowork := strings.TrimSpace(string(out))
	if gowork == "" || gowork == "off" {
		return "", errors.New("no go.work in use: run apicheck inside the repository in workspace mode (not with GOWORK=off)")
	}
	return filepath.Dir(gowork), nil
}

// A module is one module of the workspace.
type module struct {
	Path string // its module path
	Dir  string // its directory, absolute
}

// workspaceModules returns the modules of root's go.work.
func workspaceModules(root string) ([]module, error) {
	cmd := exec.Command("go", "list", "-m", "-json")
	cmd.Dir = root
	cmd.Env = workspaceEnv(root)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m -json in %s: %v: %s", root, err, strings.TrimSpace(stderr.String()))
	}
	var mods []module
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var m module
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list -m -json: %w", err)
		}
		mods = append(mods, m)
	}
	return mods, nil
}

// workspaceEnv is the go command's environment for root's go.work,
// whatever the caller's GOWORK.
func workspaceEnv(root string) []string {
	return append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work"))
}

// unpublishedDirs are the top directories of the modules whose API no
// user builds on: the development harnesses and tests (internal), the
// CLI (cmd, a binary), the examples and the deployment files.
// internal/cmd/releasecheck has the same rule for the modules it
// publishes, with cmd/ among them (users go install the CLI).
var unpublishedDirs = []string{"internal", "cmd", "examples", "deploy"}

// published reports whether the module in the directory rel (relative to
// the workspace root, slash-separated, "." for the root) is one that
// users import: outside unpublishedDirs and not under an internal
// directory.
func published(rel string) bool {
	if rel == "." {
		return true
	}
	elems := strings.Split(rel, "/")
	return !slices.Contains(unpublishedDirs, elems[0]) && !slices.Contains(elems, "internal")
}

// publishedPackage reports whether a package of a published module is
// part of its API: not a command, not internal.
func publishedPackage(p *packages.Package) bool {
	return p.Name != "main" && !slices.Contains(strings.Split(p.PkgPath, "/"), "internal")
}

// loadAPI returns the sorted features (see features) of every published
// package of the workspace at root; test files are not read.
func loadAPI(root string) ([]string, error) {
	mods, err := workspaceModules(root)
	if err != nil {
		return nil, err
	}
	var patterns []string
	for _, m := range mods {
		rel, err := filepath.Rel(root, m.Dir)
		if err != nil {
			return nil, err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case rel == ".":
			patterns = append(patterns, "./...") // the root module's packages alone
		case published(rel):
			patterns = append(patterns, "./"+rel+"/...")
		}
	}
	if len(patterns) == 0 {
		return nil, fmt.Errorf("%s/go.work lists no published module", root)
	}
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedTypes,
		Dir:  root,
		Env:  workspaceEnv(root),
	}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", strings.Join(patterns, " "), err)
	}
	if err := packageErrors(pkgs); err != nil {
		return nil, err
	}
	var lines []string
	for _, p := range pkgs {
		if publishedPackage(p) {
			lines = append(lines, features(p.Types)...)
		}
	}
	slices.Sort(lines)
	return slices.Compact(lines), nil
}

// packageErrors joins the errors of the loaded packages, nil if none.
func packageErrors(pkgs []*packages.Package) error {
	var errs []error
	for _, p := range pkgs {
		for _, e := range p.Errors {
			errs = append(errs, fmt.Errorf("%s: %s", p.PkgPath, e))
		}
	}
	return errors.Join(errs...)
}
