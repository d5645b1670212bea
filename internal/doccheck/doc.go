// Package doccheck holds the test that keeps the documentation's Go
// snippets compiling: every ```go block of the repository's Markdown files
// and every Go code block of a package documentation comment must appear,
// line for line, in Go code that the build compiles (an Example function,
// a test, or a program under examples/), in a file that imports no
// internal package. Edit a snippet and its compiled twin together.
//
// It also checks that every relative link of the Markdown files resolves:
// to a file or directory that exists and, for a link into a Markdown
// file with an anchor, to one of that file's headings (the anchors GitHub
// gives them). Moving a section to another file means updating the links
// to it.
package doccheck
