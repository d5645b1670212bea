// Package hello is in a module users do not install: not listed.
package hello

// Hidden is not listed.
func Hidden() {}
