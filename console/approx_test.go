package console

import (
	"testing"
	"time"
)

// approx writes a duration as a person plans by: days and hours, hours
// and minutes, minutes, or seconds.
func TestApprox(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		45 * time.Second: "45s", 12*time.Minute + 20*time.Second: "12m", 3 * time.Hour: "3h", 5*time.Hour + 20*time.Minute: "5h20m",
		624 * time.Hour: "26d", 51 * time.Hour: "2d3h", 3*time.Hour + 29*time.Second: "3h",
	} {
		if got := approx(d); got != want {
			t.Errorf("approx(%v) = %q, want %q", d, got, want)
		}
	}
}
