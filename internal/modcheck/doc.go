// Package modcheck holds a test, and nothing else, over the repository's
// modules: it keeps the layers in order. No package under internal/ (the
// engine and the production helpers, in any module of go.work) depends
// on package worker, other than in its tests and the development
// harnesses of internal/cmd/; test kits that need the worker live in
// shareqtest, on the public API.
//
// That the published modules work for a user (go get, go install, no
// replace line) is internal/cmd/releasecheck's, in make test too.
package modcheck
