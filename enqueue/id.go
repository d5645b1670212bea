package enqueue

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// NewID returns a fresh job ID: a UUIDv7 (RFC 9562) in its canonical
// text form, such as "0190b6a4-7c2e-7d4a-9f1b-3c5e8a7d2b10". The first 48
// bits are the Unix time in milliseconds and the next 12 the fraction of
// the millisecond, so IDs sort by creation time (to about 250 ns within a
// process); the remaining 62 bits are random. It is safe for concurrent
// use.
func NewID() string { return newIDAt(time.Now()) }

func newIDAt(now time.Time) string {
	var u [16]byte
	_, _ = rand.Read(u[:]) // crypto/rand.Read never fails (Go 1.24+)
	ms := uint64(now.UnixMilli())
	u[0], u[1], u[2], u[3], u[4], u[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	// rand_a: the sub-millisecond fraction, 12 bits (RFC 9562 method 3).
	frac := uint64(now.Sub(time.UnixMilli(int64(ms)))) * 4096 / uint64(time.Millisecond)
	u[6] = 0x70 | byte(frac>>8)&0x0f
	u[7] = byte(frac)
	u[8] = 0x80 | u[8]&0x3f // variant 10
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}
