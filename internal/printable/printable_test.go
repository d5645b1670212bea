package printable

import "testing"

func TestIs(t *testing.T) {
	for _, c := range []struct {
		name string
		b    string
		cut  bool
		want bool
	}{
		{"empty", "", false, true},
		{"JSON", `{"url":"https://img.example/1.png"}`, false, true},
		{"tabs and newlines", "a\tb\r\nc\n", false, true},
		{"accents", "café", false, true},
		{"a control character", "a\x00b", false, false},
		{"invalid UTF-8", "a\xffb", false, false},
		{"a rune cut at the end, not cut", "caf\xc3", false, false},
		{"a rune cut at the end of a cut value", "caf\xc3", true, true},
		{"invalid UTF-8 in a cut value", "\xff\xfe", true, false},
	} {
		if got := Is([]byte(c.b), c.cut); got != c.want {
			t.Errorf("%s: Is(%q, %v) = %v, want %v", c.name, c.b, c.cut, got, c.want)
		}
	}
}
