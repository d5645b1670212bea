// Package e2e is in a module users do not install: not listed.
package e2e

// Hidden is not listed.
func Hidden() {}
