package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// buildProxy writes a module proxy (the GOPROXY protocol's files, for a
// file:// URL) to dir with each published module of ws at version v,
// made from the working tree: $module/@v/list, $v.info, $v.mod and
// $v.zip.
//
// A module's zip holds the files git would publish from its directory:
// tracked or untracked but not ignored (git ls-files), less nested
// modules, as zip.Create filters them. zip.CreateFromDir would also pack
// what .gitignore keeps out of a tag (.cache/, built binaries), which
// the proxy that serves a tag never sees.
func buildProxy(ws *workspace, dir, v string) error {
	stamp, err := commitTime(ws.root)
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{v, stamp})
	if err != nil {
		return err
	}
	for _, m := range ws.published() {
		if err := addModule(ws.root, dir, m, v, info); err != nil {
			return fmt.Errorf("%s: %w", m.path, err)
		}
	}
	return nil
}

// addModule writes m's files at version v into the proxy directory dir.
func addModule(root, dir string, m *mod, v string, info []byte) error {
	esc, err := module.EscapePath(m.path)
	if err != nil {
		return err
	}
	at := filepath.Join(dir, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(m.dir, "go.mod"))
	if err != nil {
		return err
	}
	files, err := gitFiles(root, m)
	if err != nil {
		return err
	}
	var z bytes.Buffer
	if err := zip.Create(&z, module.Version{Path: m.path, Version: v}, files); err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"list":      []byte(v + "\n"),
		v + ".info": info,
		v + ".mod":  gomod,
		v + ".zip":  z.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// gitFiles returns the files of m's directory that git tracks or would
// (not ignored), as they are in the working tree; a tracked file deleted
// from the tree is left out, as its commit would leave it.
func gitFiles(root string, m *mod) ([]zip.File, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ".")
	cmd.Dir = m.dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %v: %s", m.dir, err, strings.TrimSpace(stderr.String()))
	}
	seen := map[string]bool{}
	var files []zip.File
	for _, name := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if name == "" || seen[name] {
			continue // a file both tracked and changed is listed once
		}
		seen[name] = true
		abs := filepath.Join(m.dir, filepath.FromSlash(name))
		fi, err := os.Lstat(abs)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		files = append(files, treeFile{slash: path.Clean(name), abs: abs, info: fi})
	}
	return files, nil
}

// A treeFile is a file of the working tree, for zip.Create.
type treeFile struct {
	slash string // relative to the module's directory
	abs   string
	info  os.FileInfo
}

func (f treeFile) Path() string                 { return f.slash }
func (f treeFile) Lstat() (os.FileInfo, error)  { return f.info, nil }
func (f treeFile) Open() (io.ReadCloser, error) { return os.Open(f.abs) }

// commitTime is the time of the commit checked out in root, the
// version's time in the proxy's .info files.
func commitTime(root string) (time.Time, error) {
	cmd := exec.Command("git", "log", "-1", "--format=%ct", "HEAD")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return time.Time{}, fmt.Errorf("git log -1 in %s: %w (releasecheck reads the tree's files from git)", root, err)
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("git log -1 --format=%%ct: %q: %w", out, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}
