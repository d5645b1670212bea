package doccheck

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// internalPrefix is the import path prefix no example or snippet host may
// import: users cannot.
const internalPrefix = "github.com/shareq/shareq/internal/"

// A snippet is a Go code block of the documentation.
type snippet struct {
	where string   // file:line
	lines []string // normalized (see normalize)
}

// A host is a compiled Go file that snippets may be found in.
type host struct {
	path     string
	lines    []string // normalized, with their line numbers in lineNos
	lineNos  []int
	internal string // an internal package it imports, if any
}

// skipDir reports the directories whose files are not part of the build.
func skipDir(rel string, d fs.DirEntry) bool {
	name := d.Name()
	return rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "bench-out")
}

// walk calls f for every file of the repository outside skipped
// directories, with its path relative to the root.
func walk(t *testing.T, f func(rel string)) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDir(rel, d) {
				return filepath.SkipDir
			}
			return nil
		}
		f(filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// normalize trims each line, collapses runs of blanks within it (gofmt
// aligns comments) and drops blank lines, so that a snippet matches its
// twin whatever the indentation and spacing between statements.
func normalize(text string) (lines []string, nos []int) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := strings.Join(strings.Fields(sc.Text()), " ")
		if l == "" {
			continue
		}
		lines = append(lines, l)
		nos = append(nos, n)
	}
	return lines, nos
}

// markdownSnippets returns the ```go blocks of the Markdown file rel.
func markdownSnippets(t *testing.T, rel string) []snippet {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	var (
		out   []snippet
		in    bool
		start int
		block strings.Builder
	)
	for i, l := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case !in && trimmed == "```go":
			in, start = true, i+2
			block.Reset()
		case in && trimmed == "```":
			in = false
			lines, _ := normalize(block.String())
			out = append(out, snippet{where: rel + ":" + strconv.Itoa(start), lines: lines})
		case in:
			block.WriteString(l + "\n")
		}
	}
	if in {
		t.Errorf("%s:%d: unterminated ```go block", rel, start)
	}
	return out
}

// goLike matches code that is Go and not prose or a table: a call of a
// package's exported function or method, a short variable declaration, a
// function literal or declaration.
var goLike = regexp.MustCompile(`\b[a-z][A-Za-z0-9]*\.[A-Z][A-Za-z0-9]*\(|:=|\bfunc[ (]`)

// packageDocSnippets returns the Go code blocks of the package comment of
// the Go file rel (none for a file without one). Code blocks that are not
// Go (tables, metric lists, file lists) are told apart by goLike.
func packageDocSnippets(t *testing.T, rel string) []snippet {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		return nil
	}
	// Line numbers: find each block's first line in the comment.
	raw := make([]string, 0, len(f.Doc.List))
	for _, c := range f.Doc.List {
		raw = append(raw, c.Text)
	}
	docLine := fset.Position(f.Doc.Pos()).Line
	var p comment.Parser
	var out []snippet
	from := 0 // the comment line after the previous block
	for _, b := range p.Parse(f.Doc.Text()).Content {
		code, ok := b.(*comment.Code)
		if !ok || !goLike.MatchString(code.Text) {
			continue
		}
		lines, _ := normalize(code.Text)
		line := docLine
		for i := from; i < len(raw); i++ {
			if strings.TrimSpace(strings.TrimPrefix(raw[i], "//")) == lines[0] {
				line, from = docLine+i, i+1
				break
			}
		}
		out = append(out, snippet{where: rel + ":" + strconv.Itoa(line), lines: lines})
	}
	return out
}

// loadHost reads the Go file rel as a place snippets may be found in. It
// returns false for a file the build never compiles.
func loadHost(t *testing.T, rel string) (host, bool) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(src, []byte("//go:build ignore")) {
		return host{}, false
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ImportsOnly)
	if err != nil {
		t.Errorf("%s: %v", rel, err)
		return host{}, false
	}
	h := host{path: rel}
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, internalPrefix) && !strings.HasPrefix(rel, "internal/") {
			h.internal = p
		}
	}
	h.lines, h.lineNos = normalize(string(src))
	return h, true
}

// find returns where in h the snippet's lines occur one after the other,
// or 0.
func (h host) find(s snippet) int {
	n := len(s.lines)
next:
	for i := 0; i+n <= len(h.lines); i++ {
		for k := range n {
			if h.lines[i+k] != s.lines[k] {
				continue next
			}
		}
		return h.lineNos[i]
	}
	return 0
}

// hasExample reports whether the test file declares an Example function.
func hasExample(t *testing.T, rel string) bool {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Example") {
			return true
		}
	}
	return false
}

func collect(t *testing.T) (snippets []snippet, hosts []host) {
	t.Helper()
	walk(t, func(rel string) {
		switch {
		case strings.HasSuffix(rel, ".md"):
			snippets = append(snippets, markdownSnippets(t, rel)...)
		case strings.HasSuffix(rel, ".go"):
			if !strings.HasSuffix(rel, "_test.go") {
				snippets = append(snippets, packageDocSnippets(t, rel)...)
			}
			if h, ok := loadHost(t, rel); ok {
				hosts = append(hosts, h)
			}
		}
	})
	return snippets, hosts
}

// TestSnippetsCompile checks that every Go snippet of the documentation
// has a compiled twin in a file that imports only public packages.
func TestSnippetsCompile(t *testing.T) {
	snippets, hosts := collect(t)
	if len(snippets) < 10 {
		t.Fatalf("found %d snippets; the walk from %s is broken", len(snippets), root)
	}
	for _, s := range snippets {
		var found, internal []string
		for _, h := range hosts {
			if line := h.find(s); line > 0 {
				at := h.path + ":" + strconv.Itoa(line)
				if h.internal != "" {
					internal = append(internal, at+" (imports "+h.internal+")")
				} else {
					found = append(found, at)
				}
			}
		}
		switch {
		case len(found) > 0:
			t.Logf("%s: compiled in %s", s.where, found[0])
		case len(internal) > 0:
			t.Errorf("%s: its twin %s imports an internal package, which users cannot: use public packages only", s.where, internal[0])
		default:
			t.Errorf("%s: this Go snippet is not found in any compiled Go file, so nothing checks that it compiles; put the same lines in an Example function (or a program under examples/) and keep the two in step:\n\t%s",
				s.where, strings.Join(s.lines, "\n\t"))
		}
	}
}

// TestExamplesUsePublicPackages checks that Example functions and the
// programs under examples/ import no internal package: users copy them.
func TestExamplesUsePublicPackages(t *testing.T) {
	_, hosts := collect(t)
	checked := 0
	for _, h := range hosts {
		// The programs under examples/ and Example functions; the
		// examples' own tests may use the repository's test helpers.
		var isExample bool
		if strings.HasSuffix(h.path, "_test.go") {
			isExample = hasExample(t, h.path)
		} else {
			isExample = strings.HasPrefix(h.path, "examples/")
		}
		if !isExample {
			continue
		}
		checked++
		if h.internal != "" {
			t.Errorf("%s imports %s, which users cannot import; use public packages only", h.path, h.internal)
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d example files; the walk from %s is broken", checked, root)
	}
}
