package console

import (
	"net/http"
	"strings"
	"testing"
)

// BenchmarkBasicAuth times the check of a guess that is right, one that
// differs in the password's last byte, one that differs in its first,
// and one of another length: the comparison of SHA-256 digests with
// subtle.ConstantTimeCompare takes the same time for all of them.
func BenchmarkBasicAuth(b *testing.B) {
	pass := strings.Repeat("p", 40)
	check := basicAuth("ops", pass)
	for _, bc := range []struct{ name, pass string }{
		{"right", pass},
		{"last byte wrong", pass[:39] + "q"},
		{"first byte wrong", "q" + pass[1:]},
		{"shorter", "p"},
	} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.SetBasicAuth("ops", bc.pass)
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				check(r)
			}
		})
	}
}
