package doccheck

import (
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// A link is a relative link of a Markdown file: a path (empty for the
// file itself) and an anchor (empty for none).
type link struct {
	where  string // file:line
	target string // the path, relative to the root
	anchor string
}

var (
	// inlineLink matches a link or an image, [text](dest) or
	// [text](dest "title"), and captures dest.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(<?([^)\s>]+)>?(?:\s+"[^"]*")?\)`)
	// codeSpan matches an inline code span, whose text is no link.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// heading matches an ATX heading and captures its text.
	heading = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$`)
	// scheme matches a destination that is not a relative path.
	scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// fence reports whether the line opens or closes a fenced code block.
func fence(line string) bool {
	l := strings.TrimSpace(line)
	return strings.HasPrefix(l, "```") || strings.HasPrefix(l, "~~~")
}

// prose returns the lines of the Markdown text with those of fenced code
// blocks (their fences included) made empty, so that line numbers hold.
func prose(text string) []string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		if fence(l) {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
		}
	}
	return lines
}

// slug is the anchor GitHub gives a heading: its text as rendered
// (links as their text, no code or emphasis marks), lower case, without
// punctuation but hyphens and underscores, spaces as hyphens.
func slug(text string) string {
	text = inlineLink.ReplaceAllStringFunc(text, func(m string) string {
		return m[strings.Index(m, "[")+1 : strings.Index(m, "](")]
	})
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of the headings of the Markdown text, a
// repeated heading's with -1, -2, ... as GitHub numbers them.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(text) {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			seen[s]++
			s += "-" + strconv.Itoa(n)
		} else {
			seen[s] = 1
		}
		out[s] = true
	}
	return out
}

// relativeLinks returns the relative links of the Markdown file rel, code
// blocks and code spans left out. A link's text may run over lines.
func relativeLinks(rel, text string) []link {
	body := strings.Join(prose(text), "\n")
	body = codeSpan.ReplaceAllStringFunc(body, func(m string) string {
		return strings.Repeat("\n", strings.Count(m, "\n")) // keep the line numbers
	})
	var out []link
	for _, m := range inlineLink.FindAllStringSubmatchIndex(body, -1) {
		dest := body[m[2]:m[3]]
		if scheme.MatchString(dest) || strings.HasPrefix(dest, "//") {
			continue
		}
		p, anchor, _ := strings.Cut(dest, "#")
		target := rel
		if p != "" {
			target = path.Join(path.Dir(rel), p)
		}
		line := 1 + strings.Count(body[:m[0]], "\n")
		out = append(out, link{where: rel + ":" + strconv.Itoa(line), target: target, anchor: anchor})
	}
	return out
}

// TestMarkdownLinksResolve checks that every relative link of the
// repository's Markdown files names a file or directory that exists and,
// into a Markdown file, a heading that it has.
func TestMarkdownLinksResolve(t *testing.T) {
	texts := map[string]string{}
	walk(t, func(rel string) {
		if strings.HasSuffix(rel, ".md") {
			b, err := os.ReadFile(filepath.Join(root, rel))
			if err != nil {
				t.Fatal(err)
			}
			texts[rel] = string(b)
		}
	})
	checked := 0
	for _, rel := range slices.Sorted(maps.Keys(texts)) {
		for _, l := range relativeLinks(rel, texts[rel]) {
			checked++
			if strings.HasPrefix(l.target, "../") {
				t.Errorf("%s: link to %s leaves the repository", l.where, l.target)
				continue
			}
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(l.target))); err != nil {
				t.Errorf("%s: link to %s: no such file or directory", l.where, l.target)
				continue
			}
			if l.anchor == "" || !strings.HasSuffix(l.target, ".md") {
				continue
			}
			if !anchors(texts[l.target])[l.anchor] {
				t.Errorf("%s: link to %s#%s: %s has no heading with that anchor", l.where, l.target, l.anchor, l.target)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d links; the walk from %s is broken", checked, root)
	}
}

// TestSlug pins the anchors GitHub gives headings of the kinds these
// files use.
func TestSlug(t *testing.T) {
	for text, want := range map[string]string{
		"Partitions and workers":                             "partitions-and-workers",
		"Safe jobs: idempotency, dead letters, metrics":      "safe-jobs-idempotency-dead-letters-metrics",
		"The broker's dead-letter queue (4.4+)":              "the-brokers-dead-letter-queue-44",
		"4. A poison job near `max.message.bytes` cannot be": "4-a-poison-job-near-maxmessagebytes-cannot-be",
		"8.1 Less work per job (`otelcost`)":                 "81-less-work-per-job-otelcost",
		"Using [shareq](https://example.com) from `go_mod`":  "using-shareq-from-go_mod",
		"Following a job: OpenTelemetry":                     "following-a-job-opentelemetry",
	} {
		if got := slug(text); got != want {
			t.Errorf("slug(%q) = %q, want %q", text, got, want)
		}
	}
	got := anchors("# A\n```\n# not a heading\n```\n## A\n### B ###\n")
	for _, want := range []string{"a", "a-1", "b"} {
		if !got[want] {
			t.Errorf("anchors: no %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("anchors: a line of a code block is taken for a heading: %v", got)
	}
}
