package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// wsAPI is the API of testdata/ws: a workspace with a published root
// module and a published nested one (sub), each with an internal
// package, a command, a test file and a nested module under an internal
// directory, beside modules under cmd/, examples/, internal/ and
// deploy/. Only lib and sub are published.
var wsAPI = []string{
	"pkg example.com/ws/lib, func Hello() string",
	"pkg example.com/ws/lib, type T struct",
	"pkg example.com/ws/lib, type T struct, Name string",
	`pkg example.com/ws/sub, const Version = "1"`,
	"pkg example.com/ws/sub, const Version ideal-string",
}

func TestPublished(t *testing.T) {
	t.Parallel()
	for rel, want := range map[string]bool{
		".":                         true,
		"console":                   true,
		"enqueue/pgoutbox":          true,
		"metrics/outboxmetrics":     true,
		"workerfx/outboxfx":         true,
		"cmd/shareq":                false,
		"examples":                  false,
		"deploy":                    false,
		"internal/cmd/apicheck":     false,
		"internal/e2e":              false,
		"shareqotel/internal/e2e":   false,
		"internalish":               true,
		"metrics/internal":          false,
		"examples/thumbnails/extra": false,
	} {
		if got := published(rel); got != want {
			t.Errorf("published(%q) = %v, want %v", rel, got, want)
		}
	}
}

// TestLoadAPI loads testdata/ws from three of its directories: the
// lines are the published packages' and the same from each.
func TestLoadAPI(t *testing.T) {
	t.Setenv("GOWORK", "") // find testdata/ws/go.work, whatever the caller's
	for _, dir := range []string{"testdata/ws", "testdata/ws/lib", "testdata/ws/sub/internal/e2e"} {
		root, err := workspaceRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := filepath.Abs("testdata/ws"); root != want {
			t.Errorf("workspaceRoot(%s) = %s, want %s", dir, root, want)
		}
		got, err := loadAPI(root)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, wsAPI) {
			t.Errorf("loadAPI from %s:\n%s\nwant:\n%s", dir, strings.Join(got, "\n"), strings.Join(wsAPI, "\n"))
		}
	}
}

func TestWorkspaceRootOff(t *testing.T) {
	t.Setenv("GOWORK", "off")
	_, err := workspaceRoot("testdata/ws")
	if err == nil || !strings.Contains(err.Error(), "workspace mode") {
		t.Errorf("workspaceRoot with GOWORK=off: %v, want an error saying to use workspace mode", err)
	}
}
