package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"sync"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
)

// encoded returns a w×h test image encoded as format.
func encoded(t testing.TB, w, h int, format string) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x), uint8(y), uint8(x + y), 255})
		}
	}
	var buf bytes.Buffer
	var err error
	if format == "png" {
		err = png.Encode(&buf, img)
	} else {
		err = jpeg.Encode(&buf, img, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestMakeThumbnails(t *testing.T) {
	t.Parallel()
	type size struct{ w, h int }
	for _, tc := range []struct {
		name   string
		w, h   int
		format string
		want   []size // for sizes 256, 128, 64
	}{
		{"landscape png", 800, 400, "png", []size{{256, 128}, {128, 64}, {64, 32}}},
		{"portrait jpeg", 300, 600, "jpeg", []size{{128, 256}, {64, 128}, {32, 64}}},
		{"square jpeg", 1024, 1024, "jpeg", []size{{256, 256}, {128, 128}, {64, 64}}},
		{"small png is not enlarged", 100, 50, "png", []size{{100, 50}, {100, 50}, {64, 32}}},
		{"thin png keeps one pixel", 1000, 2, "png", []size{{256, 1}, {128, 1}, {64, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			thumbs, err := MakeThumbnails(encoded(t, tc.w, tc.h, tc.format), []int{256, 128, 64})
			if err != nil {
				t.Fatalf("MakeThumbnails: %v", err)
			}
			if len(thumbs) != 3 {
				t.Fatalf("got %d thumbnails, want 3", len(thumbs))
			}
			for i, th := range thumbs {
				if th.Size != []int{256, 128, 64}[i] {
					t.Errorf("thumbnail %d: size %d, want the order asked for", i, th.Size)
				}
				if th.Width != tc.want[i].w || th.Height != tc.want[i].h {
					t.Errorf("size %d: %dx%d, want %dx%d", th.Size, th.Width, th.Height, tc.want[i].w, tc.want[i].h)
				}
				// The bytes must decode, as the same format, to the
				// dimensions reported.
				cfg, format, err := image.DecodeConfig(bytes.NewReader(th.Data))
				if err != nil {
					t.Fatalf("size %d: decode the thumbnail: %v", th.Size, err)
				}
				if format != tc.format || th.Format != tc.format {
					t.Errorf("size %d: format %q (reported %q), want %q", th.Size, format, th.Format, tc.format)
				}
				if cfg.Width != th.Width || cfg.Height != th.Height {
					t.Errorf("size %d: encoded %dx%d, reported %dx%d", th.Size, cfg.Width, cfg.Height, th.Width, th.Height)
				}
			}
		})
	}
}

// The generated images are what the demo produces; each must thumbnail.
func TestGeneratedImagesThumbnail(t *testing.T) {
	t.Parallel()
	seen := map[pattern]bool{}
	for seed := uint64(0); len(seen) < int(numPatterns); seed++ {
		img, p := genImage(seed, 384)
		if seen[p] {
			continue
		}
		seen[p] = true
		data, ct, err := encodeImage(img, p)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := genImage(seed, 384)
		if !bytes.Equal(img.(*image.RGBA).Pix, again.(*image.RGBA).Pix) {
			t.Errorf("seed %d: two draws differ; images must be deterministic", seed)
		}
		thumbs, err := MakeThumbnails(data, thumbnailSizes)
		if err != nil {
			t.Fatalf("seed %d (%v, %s): %v", seed, p, ct, err)
		}
		b := img.Bounds()
		if b.Dx() < 96 || b.Dy() < 96 || b.Dx() > 384 || b.Dy() > 384 {
			t.Errorf("seed %d: %dx%d, want sides between 96 and 384", seed, b.Dx(), b.Dy())
		}
		if got, want := max(thumbs[0].Width, thumbs[0].Height), min(256, max(b.Dx(), b.Dy())); got != want {
			t.Errorf("seed %d: longest side %d, want %d", seed, got, want)
		}
	}
}

// pngHeader returns a valid PNG signature and IHDR chunk declaring a w×h
// image, and nothing else.
func pngHeader(w, h uint32) []byte {
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 6 // 8-bit RGBA
	chunk := append([]byte("IHDR"), ihdr...)
	out := []byte("\x89PNG\r\n\x1a\n")
	out = binary.BigEndian.AppendUint32(out, uint32(len(ihdr)))
	out = append(out, chunk...)
	return binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(chunk))
}

func TestMakeThumbnailsBadInput(t *testing.T) {
	t.Parallel()
	good := encoded(t, 64, 64, "png")
	corrupt, err := jobSpec{seed: 7, maxSide: 64, demo: "corrupt"}.record(topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		data   []byte
		reason string
	}{
		{"empty", nil, handler.ReasonDecode},
		{"garbage", []byte("this is not an image"), handler.ReasonDecode},
		{"the demo's corrupt job", corrupt.Value, handler.ReasonDecode},
		{"truncated png", good[:len(good)/2], handler.ReasonDecode},
		{"gif is not supported", []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00;"), handler.ReasonDecode},
		{"a header claiming 100000x100000", pngHeader(100000, 100000), ReasonTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := MakeThumbnails(tc.data, thumbnailSizes)
			if !handler.IsPermanent(err) {
				t.Fatalf("err = %v, want a permanent error", err)
			}
			if got := handler.ReasonOf(err); got != tc.reason {
				t.Errorf("reason %q, want %q (err %v)", got, tc.reason, err)
			}
		})
	}
}

// FuzzMakeThumbnails: job values come from producers and can hold
// anything. MakeThumbnails must not panic, and every failure must be
// permanent (retrying the same bytes cannot help).
func FuzzMakeThumbnails(f *testing.F) {
	f.Add(encoded(f, 20, 10, "png"))
	f.Add(encoded(f, 10, 20, "jpeg"))
	f.Add(pngHeader(1, 1))
	f.Add([]byte("\x89PNG\r\n\x1a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		thumbs, err := MakeThumbnails(data, []int{32, 8})
		if err != nil {
			if !handler.IsPermanent(err) {
				t.Fatalf("err = %v, want a permanent error", err)
			}
			return
		}
		for _, th := range thumbs {
			if th.Width < 1 || th.Height < 1 || max(th.Width, th.Height) > th.Size {
				t.Fatalf("thumbnail %d is %dx%d", th.Size, th.Width, th.Height)
			}
		}
	})
}

// recordingSink remembers what was saved.
type recordingSink struct {
	mu    sync.Mutex
	saved map[string][]Thumbnail
	err   error
}

func (s *recordingSink) Save(_ context.Context, _ *handler.Job, id string, thumbs []Thumbnail) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if s.saved == nil {
		s.saved = map[string][]Thumbnail{}
	}
	s.saved[id] = thumbs
	return nil
}

// job returns the job the demo's producer makes for spec, as delivered
// for the delivery'th time.
func job(t *testing.T, spec jobSpec, delivery int32) *handler.Job {
	t.Helper()
	rec, err := spec.record(topic)
	if err != nil {
		t.Fatal(err)
	}
	j := &handler.Job{Topic: rec.Topic, Value: rec.Value, DeliveryCount: delivery, DeliveryLimit: 5}
	for _, h := range rec.Headers {
		j.Headers = append(j.Headers, handler.Header{Key: h.Key, Value: h.Value})
	}
	return j
}

func TestThumbnailerHandle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	t.Run("saves every size under the image ID", func(t *testing.T) {
		t.Parallel()
		sink := &recordingSink{}
		th := &Thumbnailer{Sizes: thumbnailSizes, Sink: sink}
		if err := th.Handle(ctx, job(t, jobSpec{seed: 3, maxSide: 512, jobID: "r/img-0003", imageID: "img-0003"}, 1)); err != nil {
			t.Fatal(err)
		}
		if got := len(sink.saved["img-0003"]); got != len(thumbnailSizes) {
			t.Errorf("saved %d thumbnails, want %d", got, len(thumbnailSizes))
		}
		if th.Runs() != 1 {
			t.Errorf("Runs() = %d, want 1", th.Runs())
		}
	})

	t.Run("corrupt image fails permanently with reason decode", func(t *testing.T) {
		t.Parallel()
		th := &Thumbnailer{Sizes: thumbnailSizes, Sink: &recordingSink{}}
		err := th.Handle(ctx, job(t, jobSpec{seed: 7, maxSide: 512, jobID: "r/img-0007", imageID: "img-0007", demo: "corrupt"}, 1))
		if !handler.IsPermanent(err) || handler.ReasonOf(err) != handler.ReasonDecode {
			t.Fatalf("err = %v (reason %q), want permanent with reason decode", err, handler.ReasonOf(err))
		}
	})

	t.Run("missing image ID fails permanently", func(t *testing.T) {
		t.Parallel()
		th := &Thumbnailer{Sizes: thumbnailSizes, Sink: &recordingSink{}}
		j := job(t, jobSpec{seed: 1, maxSide: 512, jobID: "r/img-0001", imageID: "img-0001"}, 1)
		j.Headers = nil
		if err := th.Handle(ctx, j); !handler.IsPermanent(err) {
			t.Fatalf("err = %v, want permanent", err)
		}
	})

	t.Run("flaky job fails its first delivery only, retryably", func(t *testing.T) {
		t.Parallel()
		th := &Thumbnailer{Sizes: thumbnailSizes, Sink: &recordingSink{}}
		spec := jobSpec{seed: 2, maxSide: 512, jobID: "r/img-0002", imageID: "img-0002", demo: "flaky"}
		err := th.Handle(ctx, job(t, spec, 1))
		if err == nil || handler.IsPermanent(err) {
			t.Fatalf("first delivery: err = %v, want a retryable error", err)
		}
		if err := th.Handle(ctx, job(t, spec, 2)); err != nil {
			t.Fatalf("second delivery: %v", err)
		}
	})

	t.Run("slow job returns when its context is cancelled", func(t *testing.T) {
		t.Parallel()
		sink := &recordingSink{}
		th := &Thumbnailer{Sizes: thumbnailSizes, Sink: sink, SlowDelay: time.Hour}
		ctx, cancel := context.WithCancelCause(ctx)
		stop := errors.New("shutting down")
		time.AfterFunc(50*time.Millisecond, func() { cancel(stop) })
		err := th.Handle(ctx, job(t, jobSpec{seed: 4, maxSide: 512, jobID: "r/img-0004", imageID: "img-0004", demo: "slow"}, 1))
		if !errors.Is(err, stop) || handler.IsPermanent(err) {
			t.Fatalf("err = %v, want the cancellation cause, retryable", err)
		}
		if len(sink.saved) != 0 {
			t.Error("a cancelled job saved thumbnails")
		}
	})

	t.Run("sink failure is retryable", func(t *testing.T) {
		t.Parallel()
		th := &Thumbnailer{Sizes: thumbnailSizes, Sink: &recordingSink{err: errors.New("disk full")}}
		err := th.Handle(ctx, job(t, jobSpec{seed: 5, maxSide: 512, jobID: "r/img-0005", imageID: "img-0005"}, 1))
		if err == nil || handler.IsPermanent(err) || handler.ReasonOf(err) != "store" {
			t.Fatalf("err = %v (reason %q), want retryable with reason store", err, handler.ReasonOf(err))
		}
	})
}

func TestPlanJobs(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 2, 3, 4, 30, 300, 1000} {
		jobs := planJobs("run", n, 64)
		if len(jobs) != n {
			t.Fatalf("n=%d: %d jobs", n, len(jobs))
		}
		kinds := map[string]int{}
		ids := map[string]bool{}
		for _, j := range jobs {
			kinds[j.demo]++
			if ids[j.jobID] {
				t.Errorf("n=%d: job ID %s twice", n, j.jobID)
			}
			ids[j.jobID] = true
		}
		if n == 0 {
			continue
		}
		if kinds["corrupt"] != 1 {
			t.Errorf("n=%d: %d corrupt jobs, want 1", n, kinds["corrupt"])
		}
		if n >= 3 && kinds["flaky"] != 1 {
			t.Errorf("n=%d: %d flaky jobs, want 1", n, kinds["flaky"])
		}
		if wantSlow := max(1, n/60); n >= 4 && kinds["slow"] != wantSlow {
			t.Errorf("n=%d: %d slow jobs, want %d", n, kinds["slow"], wantSlow)
		}
	}
}
