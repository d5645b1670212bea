// Package printable tells text from binary in a job's payload, for the
// places that show one to an operator (shareq dlq show, the console): as
// text when it is, as hex when it is not.
package printable

import (
	"unicode"
	"unicode/utf8"
)

// Is reports whether b is UTF-8 text without control characters other
// than tab and newlines. cut says b was cut from a longer value: then it
// may end inside a rune.
func Is(b []byte, cut bool) bool {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			return cut && !utf8.FullRune(b)
		}
		if !unicode.IsPrint(r) && r != '\n' && r != '\t' && r != '\r' {
			return false
		}
		b = b[n:]
	}
	return true
}
