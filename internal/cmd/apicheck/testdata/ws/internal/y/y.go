// Package y is internal to the root module: not listed.
package y

// Hidden is not listed.
func Hidden() {}
