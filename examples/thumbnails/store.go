package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/shareq/shareq/handler"
)

// memorySink is the Sink of the demo without a database: it writes the
// thumbnails to files in dir, or keeps them in memory when dir is "", and
// remembers which images it saved.
//
// Writing a file is a side effect outside any transaction, so a job that
// runs twice writes its files twice. That is harmless here because the
// names and contents depend only on the job: the second write replaces the
// first with the same bytes. Side effects that are not naturally repeatable
// belong in the claim's transaction (see pgSink).
type memorySink struct {
	dir string

	mu     sync.Mutex
	saved  map[string]int // image ID → times saved
	kept   map[string][]Thumbnail
	thumbs int
	bytes  int64
}

var _ Sink = (*memorySink)(nil)

func newMemorySink(dir string) *memorySink {
	return &memorySink{dir: dir, saved: make(map[string]int), kept: make(map[string][]Thumbnail)}
}

func (s *memorySink) Save(_ context.Context, _ *handler.Job, imageID string, thumbs []Thumbnail) error {
	if s.dir != "" {
		if err := writeFiles(s.dir, imageID, thumbs); err != nil {
			return err
		}
	}
	s.record(imageID, thumbs, s.dir == "")
	return nil
}

func (s *memorySink) record(imageID string, thumbs []Thumbnail, keep bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saved[imageID]++
	if s.saved[imageID] > 1 {
		return // a second run of the job replaced its files: count them once
	}
	s.thumbs += len(thumbs)
	for _, t := range thumbs {
		s.bytes += int64(len(t.Data))
	}
	if keep {
		s.kept[imageID] = thumbs
	}
}

// stats returns how many images and thumbnails were saved, their total size,
// and the images saved more than once.
func (s *memorySink) stats() (images, thumbs int, bytes int64, twice []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, n := range s.saved {
		if n > 1 {
			twice = append(twice, id)
		}
	}
	return len(s.saved), s.thumbs, s.bytes, twice
}

// writeFiles writes each thumbnail to dir/<image>_<size>.<format>. It
// writes to a temporary file and renames it, so a reader never sees half a
// thumbnail, even when a job's second run rewrites it.
func writeFiles(dir, imageID string, thumbs []Thumbnail) error {
	for _, t := range thumbs {
		name := thumbPath(dir, imageID, t)
		f, err := os.CreateTemp(dir, ".tmp-*")
		if err != nil {
			return err
		}
		_, err = f.Write(t.Data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(f.Name(), name)
		}
		if err != nil {
			os.Remove(f.Name())
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// thumbPath is where writeFiles writes t, the thumbnail of image imageID.
func thumbPath(dir, imageID string, t Thumbnail) string {
	ext := t.Format
	if ext == "jpeg" {
		ext = "jpg"
	}
	return filepath.Join(dir, fmt.Sprintf("%s_%d.%s", filepath.Base(imageID), t.Size, ext))
}
