package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// An env is the environment of the go commands of one check.
type env []string

// goEnv returns the value of the go command's setting name (go env),
// which is the environment's or the one go env -w saved.
func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// moduleEnv is the environment in which the go command sees our modules
// only as a user would: from the file:// proxy at proxyDir, with
// GOWORK=off, the module cache modcache (a throw-away one: the cache
// keeps a version's files forever, and the next tree's are other files
// at the same version), and our module path left out of the checksum
// database (GONOSUMDB): the tree's zips are not the ones a tag published,
// if any. Third-party modules come from the usual GOPROXY, after the
// developer's module cache, read as a proxy, so that they are not
// fetched again. "direct" is left out of GOPROXY: a module of ours the
// proxy lacks then fails at once, not with a git error about a
// repository.
func moduleEnv(own, proxyDir, modcache string) (env, error) {
	usual, err := goEnv("GOPROXY")
	if err != nil {
		return nil, err
	}
	proxies := []string{fileURL(proxyDir)}
	if cache, err := goEnv("GOMODCACHE"); err == nil && cache != "" {
		if fi, err := os.Stat(filepath.Join(cache, "cache", "download")); err == nil && fi.IsDir() {
			proxies = append(proxies, fileURL(filepath.Join(cache, "cache", "download")))
		}
	}
	for _, p := range strings.FieldsFunc(usual, func(r rune) bool { return r == ',' || r == '|' }) {
		if p != "direct" && p != "off" {
			proxies = append(proxies, p)
		}
	}
	nosumdb, err := goEnv("GONOSUMDB")
	if err != nil {
		return nil, err
	}
	nosumdb = strings.Trim(own+","+nosumdb, ",")
	flags, err := goEnv("GOFLAGS")
	if err != nil {
		return nil, err
	}
	return env{
		"GOWORK=off",
		"GOMODCACHE=" + modcache,
		"GOPROXY=" + strings.Join(proxies, ","),
		"GONOSUMDB=" + nosumdb,
		"GOPRIVATE=",
		"GONOPROXY=",
		// -trimpath keeps the build cache's keys free of the throw-away
		// module cache's directory, so a second run compiles nothing.
		"GOFLAGS=" + strings.TrimSpace(flags+" -modcacherw -trimpath"),
		"GIT_TERMINAL_PROMPT=0",
	}, nil
}

// fileURL is the file:// URL of the directory dir.
func fileURL(dir string) string {
	return "file://" + filepath.ToSlash(dir)
}

// goCmd runs the go command in dir with e over the environment and
// returns its combined output; the error names the command and carries
// the output.
func goCmd(dir string, e env, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), e...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.Bytes(), &goError{args: args, dir: dir, err: err, out: out.Bytes()}
	}
	return out.Bytes(), nil
}

// A goError is a go command that failed.
type goError struct {
	args []string
	dir  string
	err  error
	out  []byte
}

func (e *goError) Error() string {
	return fmt.Sprintf("go %s (in %s): %v\n%s", strings.Join(e.args, " "), e.dir, e.err, strings.TrimRight(string(e.out), "\n"))
}

func (e *goError) Unwrap() error { return e.err }
