// Command apicheck keeps a baseline of the exported API of shareq's
// published packages, so that an incompatible change is seen in make
// test rather than by a user after a release.
//
// Run from any directory of the repository, in workspace mode (go.work):
//
//	apicheck                        print the current API
//	apicheck -w api/shareq.txt      write it as the baseline (make api)
//	apicheck -check api/shareq.txt  compare the code with the baseline (make test)
//
// The published packages are those of the modules a user installs
// (every module of go.work outside internal/, cmd/, examples/ and
// deploy/, and not under an internal directory), less commands and
// internal packages; test files are not read. Their API is written one
// feature a line, sorted, in the format of Go's own api/go1.*.txt files:
// the package, then a const (its type, then its value), var, func, type,
// a struct's exported fields and embedded types, an interface's methods,
// or a method with its receiver. A line names a fact a user may build
// on, so a line that disappears is a break.
//
// With -check, every feature of the baseline must still be in the code;
// one that is not (removed, or changed, which removes its old line) is
// listed and apicheck exits with status 1. Features the baseline lacks
// are new API: they pass, and are listed as a note until make api
// records them. The output is the same on every run and from any
// directory; a failure to load a package (a compile error) exits with
// status 1 too.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case errors.Is(err, errBreak):
		os.Exit(1) // check said what broke
	default:
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(1)
	}
}

// run is apicheck with its arguments and outputs.
func run(args []string, out, errOut io.Writer) error {
	fl := flag.NewFlagSet("apicheck", flag.ContinueOnError)
	fl.SetOutput(errOut)
	write := fl.String("w", "", "write the API to this `file` (the baseline)")
	against := fl.String("check", "", "compare the API with this baseline `file`")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 || *write != "" && *against != "" {
		fl.Usage()
		return flag.ErrHelp
	}
	root, err := workspaceRoot(".")
	if err != nil {
		return err
	}
	current, err := loadAPI(root)
	if err != nil {
		return err
	}
	switch {
	case *write != "":
		return writeFile(*write, formatBaseline(current))
	case *against != "":
		data, err := os.ReadFile(*against)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: no baseline: write it with make api", *against)
		} else if err != nil {
			return err
		}
		baseline, err := readBaseline(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("%s: %w", *against, err)
		}
		return check(*against, baseline, current, out, errOut)
	default:
		_, err := out.Write(formatBaseline(current))
		return err
	}
}

// writeFile replaces file with data through a temporary file beside it,
// so that a failed write leaves the old baseline whole.
func writeFile(file string, data []byte) error {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, file); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}
