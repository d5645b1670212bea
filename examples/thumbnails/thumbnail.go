package main

// This file is the part to copy: a shareq handler that turns an image into
// thumbnails. It knows nothing about Kafka, flags or the demo's broker; it
// sees a handler.Job and returns an outcome. See worker.go for the worker
// that runs it, and run.go for the wiring.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/image/draw"

	"github.com/shareq/shareq/handler"
)

// The headers a thumbnail job carries. The record's value is the encoded
// image itself (PNG or JPEG), not JSON with base64 inside: that keeps
// records a third smaller and lets the handler decode straight from the
// record. Metadata rides in headers. (Real systems usually put the image
// in object storage and send its URL; the handler shape is the same.)
const (
	// HeaderImageID names the image; thumbnails are stored under it.
	HeaderImageID = "image-id"
	// HeaderContentType is "image/png" or "image/jpeg". The handler
	// decodes by sniffing the bytes, so a wrong content type is harmless;
	// it is there for people reading the topic.
	HeaderContentType = "content-type"
	// HeaderDemo asks the handler to misbehave, for the demo: "slow"
	// sleeps before working, "flaky" fails the first delivery. A real
	// handler has no such header.
	HeaderDemo = "demo"
)

// ReasonTooLarge is the permanent-failure reason of an image whose
// dimensions exceed MaxPixels.
const ReasonTooLarge = "too-large"

// MaxPixels bounds the images the handler decodes. A few bytes of PNG or
// JPEG can declare a gigapixel image; DecodeConfig reads only the header,
// so such a job fails permanently before any memory is spent on it.
const MaxPixels = 40_000_000

// Thumbnail is one encoded thumbnail.
type Thumbnail struct {
	Size   int    // the requested longest side, in pixels
	Width  int    // actual width
	Height int    // actual height
	Format string // "png" or "jpeg", the same as the source
	Data   []byte // the encoded image
}

// MakeThumbnails decodes src (PNG or JPEG) and returns one thumbnail per
// size, each scaled so that its longest side is that size (never larger
// than the source), in the source's format.
//
// An image that does not decode is a permanent failure with reason
// handler.ReasonDecode: delivering it again would fail the same way, so
// the worker rejects it (or the dlq middleware parks it) at once instead of
// retrying it up to the delivery limit.
func MakeThumbnails(src []byte, sizes []int) ([]Thumbnail, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(src))
	if err != nil {
		return nil, decodeError(err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, decodeError(fmt.Errorf("image is %dx%d", cfg.Width, cfg.Height))
	}
	if int64(cfg.Width)*int64(cfg.Height) > MaxPixels {
		return nil, &handler.PermanentError{Reason: ReasonTooLarge,
			Err: fmt.Errorf("image is %dx%d, more than %d pixels", cfg.Width, cfg.Height, MaxPixels)}
	}
	img, _, err := image.Decode(bytes.NewReader(src))
	if err != nil {
		return nil, decodeError(err)
	}

	// Scale the largest thumbnail from the source and each smaller one
	// from the previous: far cheaper than scaling every size from a big
	// source, and CatmullRom keeps the quality.
	order := slices.Clone(sizes)
	slices.SortFunc(order, func(a, b int) int { return b - a })
	scaled := make(map[int]image.Image, len(order))
	from := img
	for _, size := range order {
		from = scale(from, size)
		scaled[size] = from
	}

	out := make([]Thumbnail, 0, len(sizes))
	for _, size := range sizes {
		t := scaled[size]
		var buf bytes.Buffer
		switch format {
		case "png":
			err = png.Encode(&buf, t)
		default:
			format = "jpeg"
			err = jpeg.Encode(&buf, t, &jpeg.Options{Quality: 85})
		}
		if err != nil {
			// Encoding to memory fails only on a bug; retrying will
			// not help.
			return nil, handler.Permanent(fmt.Errorf("encode %s thumbnail %d: %w", format, size, err))
		}
		b := t.Bounds()
		out = append(out, Thumbnail{Size: size, Width: b.Dx(), Height: b.Dy(), Format: format, Data: buf.Bytes()})
	}
	return out, nil
}

// decodeError marks err as a permanent decode failure. handler.Permanent
// would record the reason "permanent"; the reason "decode" tells whoever
// reads the dead-letter topic that the payload, not the code, is at fault.
func decodeError(err error) error {
	return &handler.PermanentError{Reason: handler.ReasonDecode, Err: fmt.Errorf("decode image: %w", err)}
}

// scale returns src scaled so that its longest side is size, keeping the
// aspect ratio. A source already that small is returned as it is.
func scale(src image.Image, size int) image.Image {
	b := src.Bounds()
	w, h := b.Dx(), b.Dy()
	if max(w, h) <= size {
		return src
	}
	if w >= h {
		w, h = size, max(1, h*size/w)
	} else {
		w, h = max(1, w*size/h), size
	}
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.CatmullRom.Scale(dst, dst.Bounds(), src, b, draw.Src, nil)
	return dst
}

// Sink is where a job's thumbnails go. Save is called once per successful
// run of the handler, possibly concurrently. With the idempotency
// middleware, ctx carries the claim's transaction: a Sink that writes to
// the same database writes through it, so the claim and the rows commit
// together (see store.go).
type Sink interface {
	Save(ctx context.Context, job *handler.Job, imageID string, thumbs []Thumbnail) error
}

// Thumbnailer is the handler: it makes thumbnails of the image in each job
// and hands them to Sink. It is safe for concurrent use.
type Thumbnailer struct {
	// Sizes are the longest sides of the thumbnails to make.
	Sizes []int
	// Sink receives the thumbnails.
	Sink Sink
	// SlowDelay is how long a job marked "slow" sleeps (demo only).
	SlowDelay time.Duration

	runs atomic.Int64 // successful runs, to show that each job ran once
}

var _ handler.Handler = (*Thumbnailer)(nil)

// Handle implements handler.Handler.
func (t *Thumbnailer) Handle(ctx context.Context, job *handler.Job) error {
	id, ok := job.Header(HeaderImageID)
	if !ok || len(id) == 0 {
		// No amount of retrying adds the header.
		return handler.Permanent(errors.New("job has no " + HeaderImageID + " header"))
	}
	if err := t.demo(ctx, job); err != nil {
		return err
	}
	thumbs, err := MakeThumbnails(job.Value, t.Sizes)
	if err != nil {
		return fmt.Errorf("image %s: %w", id, err)
	}
	// Check the context before the side effect: a job whose context was
	// cancelled (shutdown, MaxHold) has been released and will run again
	// elsewhere, so there is no point writing its results here.
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := t.Sink.Save(ctx, job, string(id), thumbs); err != nil {
		// A storage failure is worth another delivery: returning a plain
		// error releases the job. handler.Retry adds a reason for logs
		// and metrics.
		return handler.Retry("store", fmt.Errorf("image %s: save thumbnails: %w", id, err))
	}
	t.runs.Add(1)
	return nil
}

// Runs returns how many jobs the handler completed.
func (t *Thumbnailer) Runs() int64 { return t.runs.Load() }

// demo makes the jobs that ask for it misbehave, so the demo shows what
// the worker does with slow and failing jobs.
func (t *Thumbnailer) demo(ctx context.Context, job *handler.Job) error {
	v, _ := job.Header(HeaderDemo)
	switch string(v) {
	case "slow":
		// A slow job must still return when its context is cancelled:
		// the worker cancels it at shutdown and when it has held its
		// lock for MaxHold, and has released its record by then.
		select {
		case <-time.After(t.SlowDelay):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	case "flaky":
		// Fail the first delivery as a flaky upstream would. The worker
		// RELEASEs the record and the broker delivers it again with
		// DeliveryCount 2.
		if job.DeliveryCount <= 1 {
			return handler.Retry("upstream-timeout", errors.New("simulated upstream timeout on the first delivery"))
		}
	}
	return nil
}
