package main

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// console writes status to stderr. On a terminal the status is one line
// redrawn in place (a progress bar); log lines written through console (it
// is the slog handler's writer) erase the bar first and redraw it after,
// so the two never mix. Elsewhere (a pipe, a CI log) status lines are
// plain lines.
type console struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	quiet bool
	bar   string // the bar on screen, "" when none
}

func newConsole(w io.Writer, quiet bool) *console {
	return &console{w: w, tty: isTerminal(w), quiet: quiet}
}

// isTerminal reports whether w is a character device, such as a
// terminal, rather than a file or a pipe.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Write writes a log line.
func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bar != "" {
		io.WriteString(c.w, "\r\x1b[K")
	}
	n, err := c.w.Write(p)
	if c.bar != "" {
		io.WriteString(c.w, c.bar)
	}
	return n, err
}

// printf writes an informational line, unless quiet.
func (c *console) printf(format string, args ...any) {
	if c.quiet {
		return
	}
	fmt.Fprintf(c, format+"\n", args...)
}

// status shows the progress line: redrawn in place on a terminal, else
// printed as a line of its own.
func (c *console) status(line string) {
	if c.quiet {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.tty {
		fmt.Fprintln(c.w, line)
		return
	}
	c.bar = line
	io.WriteString(c.w, "\r\x1b[K"+line)
}

// clear erases the progress bar for good.
func (c *console) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bar != "" {
		io.WriteString(c.w, "\r\x1b[K")
		c.bar = ""
	}
}
