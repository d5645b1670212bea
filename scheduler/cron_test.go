package scheduler

import (
	"strings"
	"testing"
	"time"
)

func mustTime(t testing.TB, loc *time.Location, s string) time.Time {
	t.Helper()
	at, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

func TestCronNext(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr, after string
		want        []string
	}{
		{"* * * * *", "2026-01-01 10:00", []string{"2026-01-01 10:01", "2026-01-01 10:02"}},
		{"*/15 * * * *", "2026-01-01 10:07", []string{"2026-01-01 10:15", "2026-01-01 10:30", "2026-01-01 10:45", "2026-01-01 11:00"}},
		{"5/20 * * * *", "2026-01-01 10:00", []string{"2026-01-01 10:05", "2026-01-01 10:25", "2026-01-01 10:45", "2026-01-01 11:05"}},
		{"0 3 * * *", "2026-01-01 03:00", []string{"2026-01-02 03:00", "2026-01-03 03:00"}},
		{"30 9-17/4 * * *", "2026-01-01 00:00", []string{"2026-01-01 09:30", "2026-01-01 13:30", "2026-01-01 17:30", "2026-01-02 09:30"}},
		{"0 0 1,15 * *", "2026-01-10 00:00", []string{"2026-01-15 00:00", "2026-02-01 00:00", "2026-02-15 00:00"}},
		{"0 0 31 * *", "2026-01-31 00:00", []string{"2026-03-31 00:00", "2026-05-31 00:00"}},
		{"0 0 29 2 *", "2026-01-01 00:00", []string{"2028-02-29 00:00", "2032-02-29 00:00"}},
		{"0 0 29 2 *", "2096-03-01 00:00", []string{"2104-02-29 00:00"}},                           // 2100 is no leap year
		{"0 12 * * MON-FRI", "2026-01-02 12:00", []string{"2026-01-05 12:00", "2026-01-06 12:00"}}, // Fri -> Mon
		{"0 0 * * 7", "2026-01-01 00:00", []string{"2026-01-04 00:00", "2026-01-11 00:00"}},        // Sunday
		{"0 0 * * sun", "2026-01-01 00:00", []string{"2026-01-04 00:00"}},
		{"0 0 13 * FRI", "2026-01-01 00:00", []string{"2026-01-02 00:00", "2026-01-09 00:00", "2026-01-13 00:00"}}, // either
		{"0 0 * jan,JUL *", "2026-02-01 00:00", []string{"2026-07-01 00:00", "2026-07-02 00:00"}},
		{"@hourly", "2026-01-01 10:59", []string{"2026-01-01 11:00", "2026-01-01 12:00"}},
		{"@daily", "2026-01-01 10:00", []string{"2026-01-02 00:00"}},
		{"@weekly", "2026-01-01 10:00", []string{"2026-01-04 00:00"}},
		{"@monthly", "2026-01-01 00:00", []string{"2026-02-01 00:00"}},
		{"@yearly", "2026-01-01 00:00", []string{"2027-01-01 00:00"}},
		{"59 23 31 12 *", "2026-12-31 23:59", []string{"2027-12-31 23:59"}},
	} {
		c, err := ParseCron(tc.expr)
		if err != nil {
			t.Errorf("ParseCron(%q): %v", tc.expr, err)
			continue
		}
		at := mustTime(t, time.UTC, tc.after)
		for _, w := range tc.want {
			at = c.Next(at)
			if want := mustTime(t, time.UTC, w); !at.Equal(want) {
				t.Errorf("%q: Next = %v, want %v", tc.expr, at, want)
				break
			}
		}
	}
}

// Next from a time within a minute fires at the next whole minute, never
// at t itself.
func TestCronNextSeconds(t *testing.T) {
	t.Parallel()
	c := MustParseCron("* * * * *")
	at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	if got := c.Next(at); !got.Equal(at.Add(time.Minute)) {
		t.Errorf("Next(%v) = %v", at, got)
	}
	if got := c.Next(at.Add(59*time.Second + 999*time.Millisecond)); !got.Equal(at.Add(time.Minute)) {
		t.Errorf("Next(10:00:59.999) = %v", got)
	}
}

func TestCronIn(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skipf("no tzdata: %v", err)
	}
	c := MustParseCron("30 2 * * *").In(ny)
	// 2026-03-08: clocks go from 02:00 to 03:00; 02:30 does not exist.
	got := c.Next(mustTime(t, ny, "2026-03-07 03:00"))
	if want := mustTime(t, ny, "2026-03-09 02:30"); !got.Equal(want) {
		t.Errorf("over the spring gap: Next = %v, want %v", got, want)
	}
	// 2026-11-01: 01:30 happens twice; it fires at the first only.
	c = MustParseCron("30 1 * * *").In(ny)
	first := c.Next(mustTime(t, ny, "2026-11-01 00:00"))
	if _, off := first.Zone(); off != -4*3600 {
		t.Errorf("first 01:30 on the fall day: %v, want EDT", first)
	}
	if next := c.Next(first); !next.Equal(mustTime(t, ny, "2026-11-02 01:30")) {
		t.Errorf("after the first 01:30: %v, want the next day", next)
	}
	if c.Location() != ny || c.String() != "30 1 * * *" {
		t.Errorf("Location %v, String %q", c.Location(), c.String())
	}
	daily := MustParseCron("0 0 * * *").In(ny)
	if got, want := daily.Next(mustTime(t, ny, "2026-01-01 12:00")), mustTime(t, ny, "2026-01-02 00:00"); !got.Equal(want) {
		t.Errorf("midnight in New York: %v, want %v", got, want)
	}
}

func TestParseCronErrors(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string]string{
		"":             "0 fields",
		"* * * *":      "4 fields",
		"* * * * * *":  "6 fields",
		"60 * * * *":   "minute: value 60 out of range 0-59",
		"* 24 * * *":   "hour: value 24",
		"* * 0 * *":    "day of month: value 0",
		"* * 32 * *":   "day of month: value 32",
		"* * * 13 *":   "month: value 13",
		"* * * * 8":    "day of week: value 8",
		"*/0 * * * *":  "bad step",
		"*/x * * * *":  "bad step",
		"5-1 * * * *":  "ends before it starts",
		"a * * * *":    "bad value",
		"-1 * * * *":   "bad value",
		"+1 * * * *":   "bad value",
		"1,,2 * * * *": "bad value",
		"* * * FOO *":  "bad value",
		"0 0 30 2 *":   "no such day",
		"0 0 31 4,6 *": "no such day",
		"@every 5m":    "fields",
		"*/61 * * * *": "bad step",
	} {
		_, err := ParseCron(expr)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCron(%q) = %v, want an error with %q", expr, err, want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("MustParseCron of a bad expression did not panic")
		}
	}()
	MustParseCron("bad")
}

// matches reports whether at, a whole minute, matches c, by the fields
// directly.
func (c *Cron) matches(at time.Time) bool {
	at = at.In(c.loc)
	return c.minute&(1<<at.Minute()) != 0 && c.hour&(1<<at.Hour()) != 0 &&
		c.month&(1<<int(at.Month())) != 0 && c.dayMatches(at)
}

// FuzzParseCron: any input parses or fails without panicking; a parsed
// expression's Next is a later whole minute that matches, with no
// matching minute skipped before it (checked minute by minute within a
// day), from any start.
func FuzzParseCron(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/15 * * * *", "0 3 * * MON-FRI", "0 0 29 2 *", "5/20 1-5 1,15 JAN-JUN 0-7", "@daily", "0 0 13 * FRI", "1-59/58 23 31 12 SUN"} {
		f.Add(s, int64(1767225600))
	}
	f.Fuzz(func(t *testing.T, expr string, unix int64) {
		c, err := ParseCron(expr)
		if err != nil {
			return
		}
		from := time.Unix(unix%(200*365*86400), 0).UTC() // 1770-2170
		next := c.Next(from)
		if next.IsZero() {
			t.Fatalf("%q: no firing after %v", expr, from)
		}
		if !next.After(from) || next.Second() != 0 || next.Nanosecond() != 0 {
			t.Fatalf("%q: Next(%v) = %v, not a later whole minute", expr, from, next)
		}
		if !c.matches(next) {
			t.Fatalf("%q: Next(%v) = %v does not match", expr, from, next)
		}
		if next.Sub(from) <= 24*time.Hour {
			for m := from.Truncate(time.Minute).Add(time.Minute); m.Before(next); m = m.Add(time.Minute) {
				if c.matches(m) {
					t.Fatalf("%q: Next(%v) = %v skips %v", expr, from, next, m)
				}
			}
		}
	})
}
