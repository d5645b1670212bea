//go:build !linux

package scheduler

import "syscall"

// childAttr: no parent-death signal outside Linux; the test's cleanups
// reap the children.
func childAttr() *syscall.SysProcAttr { return nil }
