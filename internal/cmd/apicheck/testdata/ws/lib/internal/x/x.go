// Package x is internal: not listed.
package x

// Hidden is not listed.
func Hidden() {}
