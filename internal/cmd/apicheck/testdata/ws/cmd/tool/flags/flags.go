// Package flags is in a module users do not install: not listed.
package flags

// Hidden is not listed.
func Hidden() {}
