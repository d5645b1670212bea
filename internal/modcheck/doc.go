// Package modcheck holds tests, and nothing else, over the repository's
// modules. The first keeps docs/installing.md's instructions for using shareq
// from another module true: for each
// published module of the repository (every module of go.work outside
// internal/, cmd/, examples/ and deploy/, and not under an internal
// directory), it builds a module outside the repository with GOWORK=off,
// the guide's replace lines for it (its "```go.mod" block that starts
// "// for <module>") and a main that imports every package of the
// module, and fails, naming the lines that
// are missing or not needed, when `go mod tidy` or `go build` needs
// anything more. It also runs the guide's commands that install the CLI
// (its "```sh" block under "## Installing the CLI") and the installed
// shareq.
//
// The second keeps the layers in order: no package under internal/ (the
// engine and the production helpers, in any module of go.work) depends
// on package worker, other than in its tests and the development
// harnesses of internal/cmd/; test kits that need the worker live in
// shareqtest, on the public API.
//
// They need the go command and, on a machine with an empty module cache,
// the Go module proxy (GOPROXY, without its "direct" fallback: a module
// the guide forgot is then reported by the proxy at once).
package modcheck
