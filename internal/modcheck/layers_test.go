package modcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// shareqPath is the root module's path; every shareq module's path
// starts with it.
const shareqPath = "github.com/shareq/shareq"

// goCmd runs the go command in dir with env added to the environment,
// and returns its combined output.
func goCmd(t *testing.T, dir string, env []string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	return cmd.CombinedOutput()
}

// TestInternalDoesNotImportWorker fails if a package under the root's
// internal/ directory, in any module of go.work, depends on package
// worker, directly or through another package; tests are not counted.
// internal/ holds the engine and the production helpers that worker is
// built on: an import of worker from there runs up the layers. A test
// kit that needs the worker belongs in shareqtest, which imports the
// public API only. The development harnesses under internal/cmd/ (the
// soak, the benchmarks) are not counted either: like cmd/shareq, they
// are commands on top of the worker, kept in internal/ only so that no
// user installs them.
func TestInternalDoesNotImportWorker(t *testing.T) {
	t.Parallel()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	const worker = shareqPath + "/worker"
	const harnesses = shareqPath + "/internal/cmd/"
	out, err := goCmd(t, root, []string{"GOWORK=" + filepath.Join(abs, "go.work")}, "list", "-f",
		`{{.ImportPath}}|{{join .Imports " "}}|{{join .Deps " "}}`, shareqPath+"/internal/...")
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var listed []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.SplitN(l, "|", 3)
		if len(parts) != 3 {
			t.Fatalf("go list printed %q", l)
		}
		pkg, imports, deps := parts[0], strings.Fields(parts[1]), strings.Fields(parts[2])
		listed = append(listed, pkg)
		if strings.HasPrefix(pkg, harnesses) || !slices.Contains(deps, worker) {
			continue
		}
		// Name the imports that lead to worker, so the message says
		// where to cut.
		var via []string
		for _, imp := range imports {
			if imp == worker || strings.HasPrefix(imp, shareqPath) && dependsOn(t, abs, imp, worker) {
				via = append(via, imp)
			}
		}
		t.Errorf("%s depends on %s (through its imports %s): move what needs the worker out of internal/ (a test kit goes in shareqtest) or into a _test.go file", pkg, worker, strings.Join(via, ", "))
	}
	// The pattern must have matched the engine, or the test proves nothing.
	if !slices.Contains(listed, shareqPath+"/internal/member") {
		t.Fatalf("go list %s/internal/... did not list internal/member: %q", shareqPath, listed)
	}
}

// dependsOn reports whether package pkg depends on package dep, leaving
// tests out.
func dependsOn(t *testing.T, abs, pkg, dep string) bool {
	t.Helper()
	out, err := goCmd(t, root, []string{"GOWORK=" + filepath.Join(abs, "go.work")}, "list", "-f", `{{join .Deps "\n"}}`, pkg)
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	return slices.Contains(strings.Split(string(out), "\n"), dep)
}
