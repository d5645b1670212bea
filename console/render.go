package console

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/internal/printable"
)

// payloadView is a payload as the job page shows it: JSON pretty-printed,
// other text as it is, anything else as a hex dump; cut at a limit.
type payloadView struct {
	Text     string
	Encoding string // "json", "text" or "hex"
	Size     int    // the full size, which can exceed what is shown
	Shown    int
	Cut      bool
	Omitted  bool // parked without its value (too large for the DLQ)
}

func renderPayload(b []byte, limit int) payloadView {
	v := payloadView{Size: len(b), Shown: len(b)}
	if len(b) > limit {
		v.Cut, v.Shown = true, limit
	}
	if !v.Cut && json.Valid(b) && len(b) > 0 {
		var out bytes.Buffer
		if json.Indent(&out, b, "", "  ") == nil {
			v.Text, v.Encoding = out.String(), "json"
			return v
		}
	}
	shown := b[:v.Shown]
	if printable.Is(shown, v.Cut) {
		v.Text, v.Encoding = string(shown), "text"
		return v
	}
	v.Text, v.Encoding = hex.Dump(shown), "hex"
	return v
}

// firstLine returns the first line of s, cut to max runes.
func firstLine(s string, max int) string {
	s, _, more := strings.Cut(s, "\n")
	if utf8.RuneCountInString(s) > max {
		return string([]rune(s)[:max-1]) + "…"
	}
	if more {
		return s + " …"
	}
	return s
}

func formatRate(perSecond float64) string {
	switch {
	case perSecond == 0:
		return "0"
	case perSecond < 10:
		return strconv.FormatFloat(perSecond, 'f', 1, 64)
	}
	return strconv.FormatFloat(perSecond, 'f', 0, 64)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

var funcs = template.FuncMap{
	"time":      fmtTime,
	"firstLine": func(s string) string { return firstLine(s, 120) },
	"path":      url.PathEscape,
	"rate": func(r *control.Rate) string {
		if r == nil {
			return "code"
		}
		return r.String()
	},
	"conc": func(n *int) string {
		switch {
		case n == nil:
			return "code"
		case *n == 0:
			return "none"
		}
		return strconv.Itoa(*n)
	},
	"query": url.QueryEscape,
	"opt": func(p *int64) string {
		if p == nil {
			return "-"
		}
		return strconv.FormatInt(*p, 10)
	},
	"jobID": func(p *dlq.Parked) string {
		if !p.JobIDKnown() {
			return "(unknown: source gone)"
		}
		return p.JobID()
	},
	"lastReplay": func(p *dlq.Parked) string {
		m, ok := p.LastReplay()
		if !ok {
			return ""
		}
		s := fmt.Sprintf("%s → %s/%d/%d", fmtTime(m.At), m.Topic, m.Partition, m.Offset)
		if n := len(p.Replays); n > 1 {
			s = fmt.Sprintf("%d×, last %s", n, s)
		}
		return s
	},
	"partitions": func(ps []int32) string {
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = strconv.Itoa(int(p))
		}
		return strings.Join(s, ",")
	},
	"dur": func(d time.Duration) string { return d.Round(time.Second).String() },
}
