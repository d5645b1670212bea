package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// setVersion makes every requirement between our modules, and go.work's
// replace line for each published module, name version v, and prints
// what to do next.
func setVersion(ws *workspace, v string, out io.Writer) error {
	if !semver.IsValid(v) || semver.Canonical(v) != v || module.IsPseudoVersion(v) {
		return fmt.Errorf("-set %q: want a release version such as v0.2.0", v)
	}
	for _, m := range ws.modules {
		changed := false
		for _, r := range m.file.Require {
			if ws.ours(r.Mod.Path) && r.Mod.Version != v {
				// AddRequire changes the existing line in place.
				if err := m.file.AddRequire(r.Mod.Path, v); err != nil {
					return err
				}
				changed = true
			}
		}
		if changed {
			if err := writeFormatted(filepath.Join(m.dir, "go.mod"), m.file.Format); err != nil {
				return err
			}
		}
	}
	for _, r := range ws.work.Replace {
		if ws.ours(r.Old.Path) && r.Old.Version != v {
			if err := ws.work.AddReplace(r.Old.Path, v, r.New.Path, r.New.Version); err != nil {
				return err
			}
			if err := ws.work.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return err
			}
		}
	}
	ws.work.Cleanup()
	if err := writeFormatted(filepath.Join(ws.root, "go.work"), func() ([]byte, error) { return modfile.Format(ws.work.Syntax), nil }); err != nil {
		return err
	}
	fmt.Fprintf(out, "every requirement between our modules and go.work now name %s\nnext: make tidy, make release-check (make release runs both), CHANGELOG; after the release commit, the tags: go run ./internal/cmd/releasecheck -tags\n", v)
	return nil
}

// writeFormatted writes what format returns to name.
func writeFormatted(name string, format func() ([]byte, error)) error {
	b, err := format()
	if err != nil {
		return err
	}
	return os.WriteFile(name, b, 0o644)
}

// printTags prints the git tag commands that publish version v: one tag
// per published module, v for the root and <dir>/v for the others.
func printTags(ws *workspace, v string, out io.Writer) {
	for _, m := range ws.published() {
		tag := v
		if m.rel != "." {
			tag = m.rel + "/" + v
		}
		fmt.Fprintf(out, "git tag -a %s -m %q\n", tag, "shareq "+v+": "+m.path)
	}
}
