package main

import (
	"strings"
	"testing"

	"github.com/shareq/shareq/internal/logbuf"
)

// The summary names thumbnails as thumbnails and images as images: with
// three sizes, 299 images make 897 thumbnails, which the summary once
// printed as "897 of 299 images".
func TestSummarySavedLine(t *testing.T) {
	t.Parallel()
	var out logbuf.Buffer
	s := Summary{Images: 299, Thumbnails: 897, Bytes: 5 << 20, OutDir: "/tmp/out"}
	s.writeText(&out)
	want := "  saved            897 thumbnails of 299 images, 5.0 MiB, written to /tmp/out\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("summary lacks %q:\n%s", want, out.String())
	}
	if strings.Contains(out.String(), "897 of 299 images") {
		t.Errorf("summary counts thumbnails as images:\n%s", out.String())
	}
}

// The sink counts an image once however often its job ran, and each of
// its thumbnails once: the summary's images are distinct images, its
// thumbnails one per size of each.
func TestMemorySinkCountsImagesOnce(t *testing.T) {
	t.Parallel()
	s := newMemorySink("")
	thumbs := []Thumbnail{{Size: 256, Data: []byte("aaaa")}, {Size: 128, Data: []byte("bb")}, {Size: 64, Data: []byte("c")}}
	s.record("img-1", thumbs, true)
	s.record("img-2", thumbs, true)
	s.record("img-1", thumbs, true) // the job ran again after its lock ran out
	images, n, bytes, twice := s.stats()
	if images != 2 || n != 6 || bytes != 14 || len(twice) != 1 || twice[0] != "img-1" {
		t.Errorf("stats = %d images, %d thumbnails, %d bytes, saved twice %v; want 2, 6, 14, [img-1]", images, n, bytes, twice)
	}
}
