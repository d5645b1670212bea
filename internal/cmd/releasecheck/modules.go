package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// checkModule checks that m is tidy on its own (GOWORK=off) and vets it
// so, without go.work. A published module reads our other modules from
// the proxy of e (moduleEnv), and go mod tidy runs on a copy of its
// go.mod and go.sum (-modfile): the check reads the tree's files and
// never writes them. With write, the tidy files are written back
// instead (make tidy). A development module resolves ours through its
// replace lines, with the developer's environment.
func checkModule(ws *workspace, m *mod, e env, scratch string, write bool) error {
	if !m.published {
		return checkDevModule(m, write)
	}
	tmp, err := os.MkdirTemp(scratch, "mod-")
	if err != nil {
		return err
	}
	modfile := filepath.Join(tmp, "go.mod")
	gomod, err := os.ReadFile(filepath.Join(m.dir, "go.mod"))
	if err != nil {
		return err
	}
	gosum, err := readOptional(filepath.Join(m.dir, "go.sum"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(modfile, gomod, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "go.sum"), gosum, 0o644); err != nil {
		return err
	}
	if _, err := goCmd(m.dir, e, "mod", "tidy", "-modfile="+modfile); err != nil {
		return err
	}
	tidyMod, err := os.ReadFile(modfile)
	if err != nil {
		return err
	}
	tidySum, err := readOptional(filepath.Join(tmp, "go.sum"))
	if err != nil {
		return err
	}
	tidySum = withoutOwnSums(ws, tidySum)
	if write {
		if err := os.WriteFile(filepath.Join(m.dir, "go.mod"), tidyMod, 0o644); err != nil {
			return err
		}
		return writeOptional(filepath.Join(m.dir, "go.sum"), tidySum)
	}
	var diffs []string
	if d := lineDiff(gomod, tidyMod); d != "" {
		diffs = append(diffs, m.rel+"/go.mod:\n"+d)
	}
	if d := lineDiff(gosum, tidySum); d != "" {
		diffs = append(diffs, m.rel+"/go.sum (it keeps no line for our own modules):\n"+d)
	}
	if len(diffs) > 0 {
		return &untidyError{rel: m.rel, diff: strings.Join(diffs, "\n")}
	}
	_, err = goCmd(m.dir, e, "vet", "-modfile="+modfile, "./...")
	return err
}

// checkDevModule is checkModule for a development module.
func checkDevModule(m *mod, write bool) error {
	off := env{"GOWORK=off", "GIT_TERMINAL_PROMPT=0"}
	if write {
		_, err := goCmd(m.dir, off, "mod", "tidy")
		return err
	}
	if out, err := goCmd(m.dir, off, "mod", "tidy", "-diff"); err != nil {
		if len(out) > 0 && bytes.HasPrefix(out, []byte("diff ")) {
			return &untidyError{rel: m.rel, diff: string(out)}
		}
		return err
	}
	_, err := goCmd(m.dir, off, "vet", "./...")
	return err
}

// withoutOwnSums returns the go.sum lines of sum that are not for our
// own modules. A published module's go.sum keeps none: their hashes
// are those of the tree's zips, which change with every commit, and no
// one reads them (a user's build checks its own go.sum and the checksum
// database; go install m@v reads no go.sum).
func withoutOwnSums(ws *workspace, sum []byte) []byte {
	var out []byte
	for _, line := range bytes.SplitAfter(sum, []byte("\n")) {
		if f := strings.Fields(string(line)); len(f) > 0 && ws.ours(f[0]) {
			continue
		}
		out = append(out, line...)
	}
	return out
}

// lineDiff lists the lines only in have (-) and only in want (+), or ""
// when the two are the same.
func lineDiff(have, want []byte) string {
	if bytes.Equal(have, want) {
		return ""
	}
	h := strings.Split(strings.TrimSuffix(string(have), "\n"), "\n")
	w := strings.Split(strings.TrimSuffix(string(want), "\n"), "\n")
	var b strings.Builder
	for _, l := range h {
		if !slices.Contains(w, l) {
			fmt.Fprintf(&b, "\t-%s\n", l)
		}
	}
	for _, l := range w {
		if !slices.Contains(h, l) {
			fmt.Fprintf(&b, "\t+%s\n", l)
		}
	}
	if b.Len() == 0 {
		b.WriteString("\t(the same lines in another order)\n")
	}
	return b.String()
}

// An untidyError is a module whose go.mod or go.sum is not what go mod
// tidy writes.
type untidyError struct {
	rel  string
	diff string
}

func (e *untidyError) Error() string {
	return fmt.Sprintf("%s: go.mod or go.sum is not tidy (- the tree's line, + go mod tidy's); run: make tidy\n%s", e.rel, strings.TrimRight(e.diff, "\n"))
}

// readOptional reads name, or returns nothing if it does not exist.
func readOptional(name string) ([]byte, error) {
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// writeOptional writes data to name, or removes name when data is
// empty (go mod tidy writes no go.sum for a module without dependencies).
func writeOptional(name string, data []byte) error {
	if len(data) == 0 {
		if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return os.WriteFile(name, data, 0o644)
}
