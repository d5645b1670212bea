package main

import (
	"os"
	"strings"
	"testing"
)

// A worker paused for Postgres when a silence begins logged its one
// "dependency down" line already: the last of the two lines before the
// silence tells whether it is down.
func TestLastLineIsTellsAnOutageInProgress(t *testing.T) {
	path := t.TempDir() + "/w.log"
	log := "x dependency down; the worker paused\nx dependency back; the worker resumed\nx dependency down; the worker paused\n"
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	down, back := "dependency down; the worker paused", "dependency back; the worker resumed"
	if !lastLineIs(path, int64(len(log)), down, back) {
		t.Error("down after back: want down")
	}
	cut := int64(strings.LastIndex(log, "x dependency down"))
	if lastLineIs(path, cut, down, back) {
		t.Error("up to the back line: want not down")
	}
	if lastLineIs(path, 0, down, back) {
		t.Error("an empty log: want not down")
	}
}
