// Package doccheck holds the test that keeps the documentation's Go
// snippets compiling: every ```go block of the repository's Markdown files
// and every Go code block of a package documentation comment must appear,
// line for line, in Go code that the build compiles (an Example function,
// a test, or a program under examples/), in a file that imports no
// internal package. Edit a snippet and its compiled twin together.
package doccheck
