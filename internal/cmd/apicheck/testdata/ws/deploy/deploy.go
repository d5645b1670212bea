// Package deploy is in a module users do not install: not listed.
package deploy

// Hidden is not listed.
func Hidden() {}
