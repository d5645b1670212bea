package scheduler

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Cron is a parsed 5-field cron expression, a [Spec]: minute, hour, day
// of month, month and day of week, in a time zone (UTC unless [Cron.In]
// gave another). Safe for concurrent use; its methods never modify it.
//
// Each field is *, a value, a range a-b, a list of those joined by
// commas, and any of them with a step /n (*/15, 1-30/2, 5/10 meaning
// 5-max/10). Months may be JAN-DEC and days of week SUN-SAT (0 and 7 are
// Sunday), in any case. As in Vixie cron, when both the day of month and
// the day of week are restricted (neither starts with *), a day matches
// if either does. The macros @yearly (@annually), @monthly, @weekly,
// @daily (@midnight) and @hourly stand for their usual expressions.
//
// In a zone with daylight saving time, a wall-clock time that does not
// exist on a day (02:30 when clocks go from 02:00 to 03:00) does not fire
// that day, and one that exists twice fires at its first occurrence.
type Cron struct {
	expr                     string
	minute, hour, dom, month uint64 // bit i set: value i matches
	dow                      uint64 // bits 0-6, Sunday is 0
	domStar, dowStar         bool
	loc                      *time.Location
}

var cronMacros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

var (
	monthNames = map[string]int{"JAN": 1, "FEB": 2, "MAR": 3, "APR": 4, "MAY": 5, "JUN": 6, "JUL": 7, "AUG": 8, "SEP": 9, "OCT": 10, "NOV": 11, "DEC": 12}
	dowNames   = map[string]int{"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}
)

// ParseCron parses a 5-field cron expression (see [Cron]) in UTC.
func ParseCron(expr string) (*Cron, error) {
	c := &Cron{expr: expr, loc: time.UTC}
	spec := strings.TrimSpace(expr)
	if m, ok := cronMacros[strings.ToLower(spec)]; ok {
		spec = m
	}
	f := strings.Fields(spec)
	if len(f) != 5 {
		return nil, fmt.Errorf("scheduler: cron %q: %d fields, want 5 (minute hour day-of-month month day-of-week)", expr, len(f))
	}
	var err error
	if c.minute, err = parseField(f[0], 0, 59, nil); err != nil {
		return nil, fmt.Errorf("scheduler: cron %q: minute: %w", expr, err)
	}
	if c.hour, err = parseField(f[1], 0, 23, nil); err != nil {
		return nil, fmt.Errorf("scheduler: cron %q: hour: %w", expr, err)
	}
	if c.dom, err = parseField(f[2], 1, 31, nil); err != nil {
		return nil, fmt.Errorf("scheduler: cron %q: day of month: %w", expr, err)
	}
	if c.month, err = parseField(f[3], 1, 12, monthNames); err != nil {
		return nil, fmt.Errorf("scheduler: cron %q: month: %w", expr, err)
	}
	if c.dow, err = parseField(f[4], 0, 7, dowNames); err != nil {
		return nil, fmt.Errorf("scheduler: cron %q: day of week: %w", expr, err)
	}
	if c.dow&(1<<7) != 0 { // 7 is Sunday too
		c.dow = c.dow&^(1<<7) | 1
	}
	c.domStar, c.dowStar = strings.HasPrefix(f[2], "*"), strings.HasPrefix(f[4], "*")
	if !c.possible() {
		return nil, fmt.Errorf("scheduler: cron %q: no such day in any year", expr)
	}
	return c, nil
}

// MustParseCron is [ParseCron] for expressions known to be valid, such as
// constants: it panics on an error.
func MustParseCron(expr string) *Cron {
	c, err := ParseCron(expr)
	if err != nil {
		panic(err)
	}
	return c
}

// possible reports whether some day matches: with the day of week
// restricted, any month has every day of week (and, with both restricted,
// either field matching is enough); otherwise a day of month must exist
// in one of the months (February with its 29th).
func (c *Cron) possible() bool {
	if !c.dowStar {
		return true
	}
	days := [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	for m := 1; m <= 12; m++ {
		if c.month&(1<<m) != 0 && c.dom&(1<<(days[m]+1)-1) != 0 {
			return true
		}
	}
	return false
}

// parseField parses one comma-separated field of values in [lo, hi].
func parseField(s string, lo, hi int, names map[string]int) (uint64, error) {
	var set uint64
	for part := range strings.SplitSeq(s, ",") {
		rng, stepStr, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepStr)
			if err != nil || n <= 0 || n > hi {
				return 0, fmt.Errorf("bad step %q", stepStr)
			}
			step = n
		}
		var a, b int
		switch {
		case rng == "*":
			a, b = lo, hi
		case strings.Contains(rng, "-"):
			as, bs, _ := strings.Cut(rng, "-")
			var err error
			if a, err = value(as, lo, hi, names); err != nil {
				return 0, err
			}
			if b, err = value(bs, lo, hi, names); err != nil {
				return 0, err
			}
			if a > b {
				return 0, fmt.Errorf("range %q ends before it starts", rng)
			}
		default:
			var err error
			if a, err = value(rng, lo, hi, names); err != nil {
				return 0, err
			}
			b = a
			if hasStep {
				b = hi
			}
		}
		for v := a; v <= b; v += step {
			set |= 1 << v
		}
	}
	return set, nil
}

func value(s string, lo, hi int, names map[string]int) (int, error) {
	if v, ok := names[strings.ToUpper(s)]; ok {
		return v, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || s == "" || s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("bad value %q", s)
	}
	if v < lo || v > hi {
		return 0, fmt.Errorf("value %d out of range %d-%d", v, lo, hi)
	}
	return v, nil
}

// In returns c in the time zone loc: its fields are wall-clock times
// there. loc must not be nil.
func (c *Cron) In(loc *time.Location) *Cron {
	if loc == nil {
		panic("scheduler: Cron.In: nil location")
	}
	d := *c
	d.loc = loc
	return &d
}

// String returns the expression c was parsed from.
func (c *Cron) String() string { return c.expr }

// Location returns c's time zone.
func (c *Cron) Location() *time.Location { return c.loc }

// cronHorizon bounds the search of Next: an expression that matches at
// all (ParseCron checked) matches within 8 years (Feb 29 on a weekday
// the rules ask for is the rarest case).
const cronHorizon = 8

// Next returns the first time after t that c matches, at a whole minute,
// or the zero time if none comes within eight years (such as 29 February
// when it is restricted to a day of week that no leap year gives it).
func (c *Cron) Next(t time.Time) time.Time {
	t = t.In(c.loc)
	end := t.Year() + cronHorizon
	// The first whole minute after t.
	t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), 0, 0, c.loc).Add(time.Minute)
	for t.Year() <= end {
		switch {
		case c.month&(1<<int(t.Month())) == 0:
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, c.loc)
		case !c.dayMatches(t):
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, c.loc)
		case c.hour&(1<<t.Hour()) == 0:
			next := time.Date(t.Year(), t.Month(), t.Day(), t.Hour()+1, 0, 0, 0, c.loc)
			if !next.After(t) { // a repeated hour (clocks going back): skip it
				next = t.Truncate(time.Minute).Add(time.Hour)
			}
			t = next
		case c.minute&(1<<t.Minute()) == 0:
			// The next matching minute of this hour, or the next hour.
			rest := c.minute >> (t.Minute() + 1) << (t.Minute() + 1)
			if rest == 0 {
				t = t.Add(time.Duration(60-t.Minute()) * time.Minute)
			} else {
				t = t.Add(time.Duration(bits.TrailingZeros64(rest)-t.Minute()) * time.Minute)
			}
		case repeated(t):
			t = t.Add(time.Minute) // fired at its first occurrence
		default:
			return t
		}
	}
	return time.Time{}
}

// repeated reports whether t's wall-clock time also happened earlier, as
// in the hour repeated when clocks go back (by 30 minutes to 2 hours,
// the shifts zones use).
func repeated(t time.Time) bool {
	for _, shift := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		u := t.Add(-shift)
		if u.Hour() == t.Hour() && u.Minute() == t.Minute() && u.Day() == t.Day() {
			return true
		}
	}
	return false
}

// dayMatches reports whether t's day matches the day-of-month and
// day-of-week fields.
func (c *Cron) dayMatches(t time.Time) bool {
	dom := c.dom&(1<<t.Day()) != 0
	dow := c.dow&(1<<int(t.Weekday())) != 0
	if c.domStar || c.dowStar {
		return dom && dow
	}
	return dom || dow
}
