package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// A workspace is the repository's go.work and the modules it uses.
type workspace struct {
	root    string // the directory of go.work, absolute
	own     string // the root module's path; every module of ours starts with it
	goLine  string // the root module's go version, for the module a user starts
	work    *modfile.WorkFile
	modules []*mod // in go.work's order, the root first
}

// A mod is one module of the workspace.
type mod struct {
	path      string // its module path
	rel       string // its directory, slash-separated, relative to the root ("." for the root)
	dir       string // its directory, absolute
	published bool   // a user installs it (see isPublished)
	file      *modfile.File
}

// devDirs are the top directories of the modules no user imports: the
// development harnesses and tests (internal), the examples and the
// deployment files. cmd/ holds the CLI, which users install. apicheck
// has the same rule for packages, with cmd/ among the unpublished
// (a command has no API).
var devDirs = []string{"internal", "examples", "deploy"}

// isPublished reports whether the module in rel (slash-separated,
// relative to the root) is one a user installs: outside devDirs and not
// under an internal directory (a module's own test module).
func isPublished(rel string) bool {
	elems := strings.Split(rel, "/")
	return !slices.Contains(devDirs, elems[0]) && !slices.Contains(elems, "internal")
}

// loadWorkspace reads root/go.work and the go.mod of each module it uses.
func loadWorkspace(root string) (*workspace, error) {
	name := filepath.Join(root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork(name, data, nil)
	if err != nil {
		return nil, err
	}
	ws := &workspace{root: root, work: wf}
	for _, u := range wf.Use {
		rel := path.Clean(filepath.ToSlash(u.Path))
		m := &mod{rel: rel, dir: filepath.Join(root, filepath.FromSlash(rel)), published: isPublished(rel)}
		gomod := filepath.Join(m.dir, "go.mod")
		data, err := os.ReadFile(gomod)
		if err != nil {
			return nil, fmt.Errorf("go.work uses %s: %w", u.Path, err)
		}
		if m.file, err = modfile.Parse(gomod, data, nil); err != nil {
			return nil, err
		}
		m.path = m.file.Module.Mod.Path
		if rel == "." {
			ws.own = m.path
			if m.file.Go != nil {
				ws.goLine = m.file.Go.Version
			}
		}
		ws.modules = append(ws.modules, m)
	}
	if ws.own == "" {
		return nil, fmt.Errorf("%s does not use the root module (use .)", name)
	}
	return ws, nil
}

// ours reports whether path is a module of this repository.
func (ws *workspace) ours(path string) bool {
	return path == ws.own || strings.HasPrefix(path, ws.own+"/")
}

// published returns the modules a user installs.
func (ws *workspace) published() []*mod {
	var out []*mod
	for _, m := range ws.modules {
		if m.published {
			out = append(out, m)
		}
	}
	return out
}

// byPath returns the workspace module with the module path p, or nil.
func (ws *workspace) byPath(p string) *mod {
	for _, m := range ws.modules {
		if m.path == p {
			return m
		}
	}
	return nil
}

// version returns the one version that every requirement between our
// modules and every go.work replace line names: the version being
// prepared. It fails, saying what to change, when they disagree, when a
// published module has a replace line or requires a development module,
// or when go.work does not map a published module's version to its
// directory.
func (ws *workspace) version() (string, error) {
	var problems []string
	seen := map[string][]string{} // version -> where
	for _, m := range ws.modules {
		for _, r := range m.file.Require {
			if !ws.ours(r.Mod.Path) {
				continue
			}
			seen[r.Mod.Version] = append(seen[r.Mod.Version], m.rel+"/go.mod requires "+r.Mod.Path)
			dep := ws.byPath(r.Mod.Path)
			switch {
			case dep == nil:
				problems = append(problems, fmt.Sprintf("%s/go.mod requires %s, which is not a module of go.work", m.rel, r.Mod.Path))
			case m.published && !dep.published:
				problems = append(problems, fmt.Sprintf("%s/go.mod requires %s, a development module (%s) no user can fetch: move what it needs into a published module", m.rel, r.Mod.Path, dep.rel))
			}
		}
		if m.published {
			for _, r := range m.file.Replace {
				problems = append(problems, fmt.Sprintf("%s/go.mod has \"replace %s\": a published module has no replace line (Go ignores a dependency's, and go install refuses it); go.work serves development", m.rel, r.Old.Path))
			}
		}
	}
	versions := make([]string, 0, len(seen))
	for v := range seen {
		versions = append(versions, v)
	}
	semver.Sort(versions)
	if len(versions) != 1 {
		var where []string
		for _, v := range versions {
			where = append(where, fmt.Sprintf("%s (%s, ...)", v, seen[v][0]))
		}
		problems = append(problems, fmt.Sprintf("the requirements between our modules name %d versions, want one: %s; set them with: go run ./internal/cmd/releasecheck -set vX.Y.Z", len(versions), strings.Join(where, "; ")))
	} else if v := versions[0]; !semver.IsValid(v) || semver.Canonical(v) != v || module.IsPseudoVersion(v) {
		problems = append(problems, fmt.Sprintf("the requirements between our modules name %s, not a release version (vX.Y.Z); set one with: go run ./internal/cmd/releasecheck -set vX.Y.Z", v))
	}
	if len(problems) == 0 {
		problems = ws.checkWorkReplaces(versions[0])
	}
	if len(problems) > 0 {
		return "", &layoutError{problems}
	}
	return versions[0], nil
}

// checkWorkReplaces checks that go.work replaces each published module
// at version v with its directory, and nothing else: the workspace reads
// the go.mod of every version required, and v is not on any proxy
// before it is tagged (nor the tree's after).
func (ws *workspace) checkWorkReplaces(v string) []string {
	var problems []string
	want := map[string]string{}
	for _, m := range ws.published() {
		want[m.path] = m.rel
	}
	for _, r := range ws.work.Replace {
		rel, ok := want[r.Old.Path]
		delete(want, r.Old.Path)
		if !ok || r.Old.Version != v || path.Clean(r.New.Path) != path.Clean("./"+rel) {
			problems = append(problems, fmt.Sprintf("go.work: replace %s %s => %s; want one line per published module, its version to its directory (%s %s => ./%s)", r.Old.Path, r.Old.Version, r.New.Path, r.Old.Path, v, rel))
		}
	}
	for p, rel := range want {
		problems = append(problems, fmt.Sprintf("go.work has no replace line for %s; add: %s %s => ./%s", p, p, v, rel))
	}
	slices.Sort(problems)
	return problems
}

// A layoutError lists what is wrong with the modules' go.mod files and
// go.work, each problem with what to change.
type layoutError struct {
	problems []string
}

func (e *layoutError) Error() string {
	return "the modules are not ready to publish:\n\t" + strings.Join(e.problems, "\n\t")
}
