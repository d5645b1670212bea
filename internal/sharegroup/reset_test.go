package sharegroup

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Target
		err  string
	}{
		{in: "earliest", want: Target{Where: "earliest"}},
		{in: "latest", want: Target{Where: "latest"}},
		{in: "0", want: Target{Where: "offset", Offset: 0}},
		{in: "42", want: Target{Where: "offset", Offset: 42}},
		{in: "007", want: Target{Where: "offset", Offset: 7}},
		{in: "9223372036854775806", want: Target{Where: "offset", Offset: 9223372036854775806}},
		{in: "", err: "-to is required"},
		{in: "-1", err: "want earliest, latest or an offset"},
		{in: "+1", err: "want earliest, latest or an offset"},
		{in: " 1", err: "want earliest, latest or an offset"},
		{in: "1 ", err: "want earliest, latest or an offset"},
		{in: "1e3", err: "want earliest, latest or an offset"},
		{in: "0x10", err: "want earliest, latest or an offset"},
		{in: "1_000", err: "want earliest, latest or an offset"},
		{in: "Earliest", err: "want earliest, latest or an offset"},
		{in: "start", err: "want earliest, latest or an offset"},
		{in: "٣", err: "want earliest, latest or an offset"}, // a non-ASCII digit
		{in: "9223372036854775807", err: "offset too large"},
		{in: "99999999999999999999", err: "offset too large"},
	} {
		got, err := ParseTarget(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseTarget(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseTarget(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"earliest", "latest", "0", "42", "-1", "", "9223372036854775807", "1e3", " 7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTarget(s)
		if err != nil {
			if got != (Target{}) {
				t.Fatalf("%q: error %v with a target %v", s, err, got)
			}
			return
		}
		switch got.Where {
		case "earliest", "latest":
			if s != got.Where || got.Offset != 0 {
				t.Fatalf("%q parsed as %v", s, got)
			}
		case "offset":
			if got.Offset < 0 || got.Offset == 1<<63-1 {
				t.Fatalf("%q: offset %d out of range", s, got.Offset)
			}
			if strings.TrimLeft(s, "0123456789") != "" {
				t.Fatalf("%q accepted but is not all ASCII digits", s)
			}
			// The offset is the number written, leading zeros aside.
			if want := strings.TrimLeft(s, "0"); strconv.FormatInt(got.Offset, 10) != want && !(want == "" && got.Offset == 0) {
				t.Fatalf("%q parsed as offset %d", s, got.Offset)
			}
		default:
			t.Fatalf("%q parsed as %v", s, got)
		}
	})
}
