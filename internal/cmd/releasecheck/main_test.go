package main

import (
	"archive/zip"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A fixture workspace: a root module, a published module and a command
// that require it at v0.1.0, and a development module with replace
// lines, as the repository has them. It needs no third-party module, so
// the checks below run without a network.
var fixture = map[string]string{
	"go.work": `go 1.26.0

use (
	.
	./cmd/tool
	./internal/dev
	./sub
)

replace (
	example.com/ws v0.1.0 => ./
	example.com/ws/cmd/tool v0.1.0 => ./cmd/tool
	example.com/ws/sub v0.1.0 => ./sub
)
`,
	"go.mod":     "module example.com/ws\n\ngo 1.26.0\n",
	"ws.go":      "// Package ws is the fixture's root package.\npackage ws\n\n// Hello says hello.\nfunc Hello() string { return \"hello\" }\n",
	".gitignore": "/tool\n",
	"tool":       "an ignored build output, never published\n",
	"notes.txt":  "untracked but not ignored: published, as a commit would\n",
	"sub/go.mod": "module example.com/ws/sub\n\ngo 1.26.0\n\nrequire example.com/ws v0.1.0\n",
	"sub/sub.go": "// Package sub is the fixture's published module.\npackage sub\n\nimport \"example.com/ws\"\n\n// Hello says hello.\nfunc Hello() string { return ws.Hello() }\n",
	"cmd/tool/go.mod": `module example.com/ws/cmd/tool

go 1.26.0

require example.com/ws/sub v0.1.0

require example.com/ws v0.1.0 // indirect
`,
	"cmd/tool/main.go": "// Command tool is the fixture's command.\npackage main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n\n\t\"example.com/ws/sub\"\n)\n\nfunc main() {\n\tfmt.Fprintln(os.Stderr, \"usage: tool\", sub.Hello())\n\tos.Exit(2)\n}\n",
	"internal/dev/go.mod": `module example.com/ws/internal/dev

go 1.26.0

require example.com/ws/sub v0.1.0

require example.com/ws v0.1.0 // indirect

replace (
	example.com/ws => ../..
	example.com/ws/sub => ../../sub
)
`,
	"internal/dev/dev_test.go": "package dev\n\nimport (\n\t\"testing\"\n\n\t\"example.com/ws/sub\"\n)\n\nfunc TestHello(t *testing.T) { _ = sub.Hello() }\n",
}

// newFixture writes the fixture, with edits (file -> content, "" to
// remove), into a new git repository and returns its directory.
func newFixture(t *testing.T, edits map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{}
	for n, s := range fixture {
		files[n] = s
	}
	for n, s := range edits {
		files[n] = s
	}
	for n, s := range files {
		if s == "" {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(t, dir, "init", "-q")
	git(t, dir, "add", "-A", ":!notes.txt")
	git(t, dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "fixture")
	return dir
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// runFixture runs releasecheck on the fixture in dir with args.
func runFixture(dir string, args ...string) (string, error) {
	var out bytes.Buffer
	err := run(append([]string{"-C", dir, "-quickstart", "", "-install", "cmd/tool"}, args...), &out)
	return out.String(), err
}

func TestCheckPassesForPublishableModules(t *testing.T) {
	t.Parallel()
	dir := newFixture(t, nil)
	out, err := runFixture(dir)
	if err != nil {
		t.Fatalf("releasecheck: %v\n%s", err, out)
	}
	if !strings.Contains(out, "ok: the published modules at v0.1.0") {
		t.Errorf("output lacks the ok line:\n%s", out)
	}
	// The check reads the tree and writes nothing in it.
	cmd := exec.Command("git", "status", "--porcelain")
	cmd.Dir = dir
	if st, err := cmd.Output(); err != nil || string(st) != "?? notes.txt\n" {
		t.Errorf("git status after the check: %v\n%s", err, st)
	}
}

// TestCheckFails is the list of what the check refuses, each with the
// words its message must have: the module and what to change.
func TestCheckFails(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		edits map[string]string
		want  []string
	}{
		"a replace line in a published module": {
			edits: map[string]string{"sub/go.mod": fixture["sub/go.mod"] + "\nreplace example.com/ws => ../\n"},
			want:  []string{`sub/go.mod has "replace example.com/ws"`, "go.work serves development"},
		},
		"a requirement at the zero pseudo-version": {
			edits: map[string]string{"sub/go.mod": strings.Replace(fixture["sub/go.mod"], "v0.1.0", "v0.0.0-00010101000000-000000000000", 1)},
			want:  []string{"name 2 versions, want one", "sub/go.mod requires example.com/ws", "-set vX.Y.Z"},
		},
		"a published module requiring a development one": {
			edits: map[string]string{"sub/go.mod": fixture["sub/go.mod"] + "require example.com/ws/internal/dev v0.1.0\n"},
			want:  []string{"sub/go.mod requires example.com/ws/internal/dev, a development module"},
		},
		"go.work without a published module's replace": {
			edits: map[string]string{"go.work": strings.Replace(fixture["go.work"], "\texample.com/ws/sub v0.1.0 => ./sub\n", "", 1)},
			want:  []string{"go.work has no replace line for example.com/ws/sub; add: example.com/ws/sub v0.1.0 => ./sub"},
		},
		"an untidy published module": {
			edits: map[string]string{"cmd/tool/go.mod": strings.Replace(fixture["cmd/tool/go.mod"], "\nrequire example.com/ws v0.1.0 // indirect\n", "", 1)},
			want:  []string{"module example.com/ws/cmd/tool (cmd/tool)", "not tidy", "+require example.com/ws v0.1.0 // indirect", "make tidy"},
		},
		"an untidy development module": {
			edits: map[string]string{"internal/dev/go.mod": strings.Replace(fixture["internal/dev/go.mod"], "example.com/ws v0.1.0 // indirect", "example.com/ws v0.1.0", 1)},
			want:  []string{"module example.com/ws/internal/dev (internal/dev)", "not tidy"},
		},
		"a published package that does not build without the tree": {
			edits: map[string]string{"sub/sub.go": strings.Replace(fixture["sub/sub.go"], "ws.Hello()", "ws.Hello() + ws.Missing", 1)},
			want:  []string{"module example.com/ws/sub (sub)", "go vet", "undefined: ws.Missing"},
		},
		"a command that does not install as it should": {
			edits: map[string]string{"cmd/tool/main.go": strings.Replace(fixture["cmd/tool/main.go"], "usage: tool", "tool:", 1)},
			want:  []string{"as a user", "go install example.com/ws/cmd/tool@v0.1.0 installed", "want its usage"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := newFixture(t, c.edits)
			out, err := runFixture(dir)
			if err == nil {
				t.Fatalf("releasecheck passed, want a failure\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestSetThenCheck moves the fixture to v0.2.0 as a release does: every
// requirement and go.work's replace lines change, and the check passes
// at the new version.
func TestSetThenCheck(t *testing.T) {
	t.Parallel()
	dir := newFixture(t, nil)
	if out, err := runFixture(dir, "-set", "v0.2.0"); err != nil {
		t.Fatalf("-set v0.2.0: %v\n%s", err, out)
	}
	ws, err := loadWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := ws.version(); v != "v0.2.0" || err != nil {
		t.Fatalf("after -set v0.2.0 the version is %q, %v", v, err)
	}
	if out, err := runFixture(dir); err != nil || !strings.Contains(out, "at v0.2.0") {
		t.Fatalf("check at v0.2.0: %v\n%s", err, out)
	}
	if _, err := runFixture(dir, "-set", "v0.0.0-20200101000000-abcdefabcdef"); err == nil {
		t.Error("-set took a pseudo-version")
	}
}

// TestTidyWritesTheModuleBack: make tidy restores a requirement that
// was removed, and writes no go.sum line for our own modules.
func TestTidyWritesTheModuleBack(t *testing.T) {
	t.Parallel()
	dir := newFixture(t, map[string]string{"cmd/tool/go.mod": strings.Replace(fixture["cmd/tool/go.mod"], "\nrequire example.com/ws v0.1.0 // indirect\n", "", 1)})
	if out, err := runFixture(dir, "-tidy"); err != nil {
		t.Fatalf("-tidy: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, "cmd/tool/go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "example.com/ws v0.1.0") {
		t.Errorf("cmd/tool/go.mod after -tidy:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "cmd/tool/go.sum")); !os.IsNotExist(err) {
		t.Errorf("cmd/tool/go.sum exists after -tidy (%v); it would hold only our own modules' lines", err)
	}
	if out, err := runFixture(dir); err != nil {
		t.Fatalf("check after -tidy: %v\n%s", err, out)
	}
}

func TestTags(t *testing.T) {
	t.Parallel()
	dir := newFixture(t, nil)
	out, err := runFixture(dir, "-tags")
	if err != nil {
		t.Fatal(err)
	}
	want := "git tag -a v0.1.0 -m \"shareq v0.1.0: example.com/ws\"\n" +
		"git tag -a cmd/tool/v0.1.0 -m \"shareq v0.1.0: example.com/ws/cmd/tool\"\n" +
		"git tag -a sub/v0.1.0 -m \"shareq v0.1.0: example.com/ws/sub\"\n"
	if out != want {
		t.Errorf("-tags printed\n%s\nwant\n%s", out, want)
	}
}

// TestProxyZips: a module's zip holds the files git would publish from
// its directory, not ignored files nor nested modules.
func TestProxyZips(t *testing.T) {
	t.Parallel()
	dir := newFixture(t, nil)
	ws, err := loadWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	if err := buildProxy(ws, proxy, "v0.1.0"); err != nil {
		t.Fatal(err)
	}
	z, err := zip.OpenReader(filepath.Join(proxy, "example.com/ws/@v/v0.1.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	var names []string
	for _, f := range z.File {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	want := []string{"example.com/ws@v0.1.0/.gitignore", "example.com/ws@v0.1.0/go.mod", "example.com/ws@v0.1.0/go.work", "example.com/ws@v0.1.0/notes.txt", "example.com/ws@v0.1.0/ws.go"}
	if !slices.Equal(names, want) {
		t.Errorf("the root module's zip holds\n%s\nwant\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
	for name, want := range map[string]string{
		"example.com/ws/sub/@v/list":       "v0.1.0\n",
		"example.com/ws/sub/@v/v0.1.0.mod": fixture["sub/go.mod"],
	} {
		if got, err := os.ReadFile(filepath.Join(proxy, name)); err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(proxy, "example.com/ws/internal/dev")); !os.IsNotExist(err) {
		t.Errorf("the proxy has the development module (%v)", err)
	}
}

func TestIsPublished(t *testing.T) {
	t.Parallel()
	for rel, want := range map[string]bool{
		".":                       true,
		"cmd/shareq":              true,
		"workerfx/outboxfx":       true,
		"internal/cmd/apicheck":   false,
		"shareqotel/internal/e2e": false,
		"examples":                false,
		"deploy":                  false,
		"metrics/outboxmetrics":   true,
		"internal/consolebrowser": false,
	} {
		if got := isPublished(rel); got != want {
			t.Errorf("isPublished(%q) = %v, want %v", rel, got, want)
		}
	}
}

func TestWithoutOwnSums(t *testing.T) {
	t.Parallel()
	ws := &workspace{own: "example.com/ws"}
	in := "example.com/ws v0.1.0 h1:a=\nexample.com/ws/sub v0.1.0/go.mod h1:b=\nexample.com/wsx v1.0.0 h1:c=\ngolang.org/x/mod v0.42.0 h1:d=\n"
	want := "example.com/wsx v1.0.0 h1:c=\ngolang.org/x/mod v0.42.0 h1:d=\n"
	if got := string(withoutOwnSums(ws, []byte(in))); got != want {
		t.Errorf("withoutOwnSums:\n%s\nwant\n%s", got, want)
	}
}

// TestModuleEnv: our modules come from the proxy first, third-party ones
// from the usual GOPROXY without "direct", and only our path skips the
// checksum database.
func TestModuleEnv(t *testing.T) {
	t.Setenv("GOPROXY", "https://proxy.example.com|direct")
	t.Setenv("GONOSUMDB", "corp.example.com")
	t.Setenv("GOMODCACHE", t.TempDir()) // no cache/download: not a proxy
	e, err := moduleEnv("example.com/ws", "/tmp/p", "/tmp/mc")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"GOWORK=off",
		"GOMODCACHE=/tmp/mc",
		"GOPROXY=file:///tmp/p,https://proxy.example.com",
		"GONOSUMDB=example.com/ws,corp.example.com",
	} {
		if !slices.Contains(e, want) {
			t.Errorf("moduleEnv lacks %s: %q", want, e)
		}
	}
}

// quickstart is a fixture's quickstart, with the standard library only:
// it reaches the broker $SHAREQ_BROKERS names, logs the line the real
// one logs for the job, and stops when interrupted.
const quickstart = `// Command quick is the fixture's quickstart.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	conn, err := net.Dial("tcp", strings.Split(os.Getenv("SHAREQ_BROKERS"), ",")[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "quick:", err)
		os.Exit(1)
	}
	conn.Close()
	fmt.Println("INFO thumbnail made image_id=releasecheck width=320")
	<-ctx.Done()
}
`

// runQuick runs the check on a fixture with the quickstart src.
func runQuick(t *testing.T, src, timeout string) (string, error) {
	t.Helper()
	dir := newFixture(t, map[string]string{"examples/quick/main.go": src})
	return runFixture(dir, "-quickstart", "examples/quick", "-quickstart-timeout", timeout)
}

func TestQuickstartRuns(t *testing.T) {
	t.Parallel()
	out, err := runQuick(t, quickstart, "60s")
	if err != nil {
		t.Fatalf("releasecheck: %v\n%s", err, out)
	}
	if !strings.Contains(out, "examples/quick built and run") {
		t.Errorf("output does not say the quickstart ran:\n%s", out)
	}
}

// TestQuickstartFails: a quickstart that does not run its job and stop
// cleanly fails the check, with its output.
func TestQuickstartFails(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		src, timeout string
		want         []string
	}{
		"it exits before the job": {
			src:     strings.Replace(quickstart, "\tconn.Close()\n", "\tconn.Close()\n\tfmt.Fprintln(os.Stderr, \"quick: no topic images\")\n\tos.Exit(1)\n", 1),
			timeout: "60s",
			want:    []string{"the quickstart (examples/quick) run against an in-process broker", "SHAREQ_BROKERS=127.0.0.1:", "exited (exit status 1) before it logged \"thumbnail made\"", "quick: no topic images"},
		},
		"it does not exit 0 when interrupted": {
			src:     strings.Replace(quickstart, "\t<-ctx.Done()\n", "\t<-ctx.Done()\n\tfmt.Println(\"stopped badly\")\n\tos.Exit(3)\n", 1),
			timeout: "60s",
			want:    []string{"interrupted, it exited with exit status 3", "image_id=releasecheck", "stopped badly"},
		},
		"it never runs the job": {
			src:     strings.Replace(quickstart, "image_id=releasecheck", "image_id=another", 1),
			timeout: "3s",
			want:    []string{"no \"thumbnail made\" line within 3s", "(killed)", "image_id=another"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, err := runQuick(t, c.src, c.timeout)
			if err == nil {
				t.Fatalf("releasecheck passed, want a failure\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestHasLineWith(t *testing.T) {
	t.Parallel()
	for out, want := range map[string]bool{
		"INFO thumbnail made image_id=releasecheck\n":    true,
		"a\nINFO thumbnail made image_id=releasecheck\n": true,
		"INFO thumbnail made image_id=releasecheck":      false, // not a whole line yet
		"INFO thumbnail made\nimage_id=releasecheck\n":   false,
		"": false,
	} {
		if got := hasLineWith([]byte(out), []byte("thumbnail made"), []byte("image_id=releasecheck")); got != want {
			t.Errorf("hasLineWith(%q) = %v, want %v", out, got, want)
		}
	}
}
