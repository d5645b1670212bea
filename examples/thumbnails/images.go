package main

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"math/rand/v2"
)

// The producer makes its own images so that the demo needs no files: each
// is drawn from a seed, so the same seed always gives the same image.

// pattern is one of the kinds of picture the generator draws.
type pattern int

const (
	linearGradient pattern = iota
	radialGradient
	rings
	checkerboard
	stripes
	numPatterns
)

func (p pattern) String() string {
	return [...]string{"linear-gradient", "radial-gradient", "rings", "checkerboard", "stripes"}[p]
}

// genImage draws the image of seed: a pattern, size and colours picked from
// it. Sides are between a quarter of maxSide and maxSide pixels.
func genImage(seed uint64, maxSide int) (image.Image, pattern) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	minSide := max(1, maxSide/4)
	w := minSide + r.IntN(maxSide-minSide+1)
	h := minSide + r.IntN(maxSide-minSide+1)
	p := pattern(r.IntN(int(numPatterns)))
	a := randColor(r)
	b := randColor(r)
	period := 16 + r.IntN(48)
	angle := r.Float64() * math.Pi

	img := image.NewRGBA(image.Rect(0, 0, w, h))
	cx, cy := float64(w)/2, float64(h)/2
	diag := math.Hypot(cx, cy)
	dx, dy := math.Cos(angle), math.Sin(angle)
	for y := range h {
		row := img.Pix[y*img.Stride:]
		for x := range w {
			var t float64 // 0 → colour a, 1 → colour b
			fx, fy := float64(x)-cx, float64(y)-cy
			switch p {
			case linearGradient:
				t = 0.5 + (fx*dx+fy*dy)/(2*diag)
			case radialGradient:
				t = math.Hypot(fx, fy) / diag
			case rings:
				t = 0.5 + 0.5*math.Sin(math.Hypot(fx, fy)*2*math.Pi/float64(period))
			case checkerboard:
				if (x/period+y/period)%2 == 1 {
					t = 1
				}
			case stripes:
				if int(math.Floor((fx*dx+fy*dy)/float64(period)))&1 == 1 {
					t = 1
				}
			}
			c := mix(a, b, t)
			row[4*x+0], row[4*x+1], row[4*x+2], row[4*x+3] = c.R, c.G, c.B, 255
		}
	}
	return img, p
}

func randColor(r *rand.Rand) color.RGBA {
	return color.RGBA{uint8(r.IntN(256)), uint8(r.IntN(256)), uint8(r.IntN(256)), 255}
}

func mix(a, b color.RGBA, t float64) color.RGBA {
	t = min(max(t, 0), 1)
	l := func(x, y uint8) uint8 { return uint8(float64(x) + (float64(y)-float64(x))*t + 0.5) }
	return color.RGBA{l(a.R, b.R), l(a.G, b.G), l(a.B, b.B), 255}
}

// encodeImage encodes img as PNG (flat patterns, which PNG compresses to
// little) or JPEG (smooth gradients, which it does not) and returns the
// bytes and the content type.
func encodeImage(img image.Image, p pattern) ([]byte, string, error) {
	var buf bytes.Buffer
	switch p {
	case checkerboard, stripes:
		enc := png.Encoder{CompressionLevel: png.BestSpeed}
		if err := enc.Encode(&buf, img); err != nil {
			return nil, "", fmt.Errorf("encode png: %w", err)
		}
		return buf.Bytes(), "image/png", nil
	default:
		if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 85}); err != nil {
			return nil, "", fmt.Errorf("encode jpeg: %w", err)
		}
		return buf.Bytes(), "image/jpeg", nil
	}
}
