package scheduler

import "syscall"

// childAttr makes a child scheduler process die with the test process,
// also when the test process is killed and cannot reap it.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
