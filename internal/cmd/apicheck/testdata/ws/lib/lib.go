// Package lib is published: its API is listed.
package lib

// Hello is listed.
func Hello() string { return "hello" }

// T is listed, with its exported field.
type T struct {
	Name  string
	inner int
}
