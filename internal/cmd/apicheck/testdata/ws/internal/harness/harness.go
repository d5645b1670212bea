// Package harness is in a module users do not install: not listed.
package harness

// Hidden is not listed.
func Hidden() {}
