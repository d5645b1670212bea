// Package procstat reads a process's memory and CPU time from Linux's
// /proc, for the bench and soak commands and the measurements that watch
// worker processes and the services they use.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Memory returns the resident set of process pid now (VmRSS) and at its
// peak (VmHWM, kept by the kernel), in bytes, from /proc/PID/status.
func Memory(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status %s: %w", pid, k, err)
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	if rss == 0 || hwm == 0 {
		return rss, hwm, fmt.Errorf("/proc/%d/status: no VmRSS or VmHWM", pid)
	}
	return rss, hwm, nil
}

// userHZ is the unit of /proc/PID/stat's times: Linux reports them in
// USER_HZ ticks, 100 a second on every architecture it supports.
const userHZ = 100

// stat returns the fields of /proc/PID/stat after the command (which may
// hold spaces and parentheses): field 3 of proc(5), the state, is [0].
func stat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return f, nil
}

// CPU returns the CPU time process pid has used so far, in user and
// kernel mode (utime + stime, from /proc/PID/stat).
func CPU(pid int) (time.Duration, error) {
	f, err := stat(pid)
	if err != nil {
		return 0, err
	}
	var ticks int64
	for _, s := range f[11:13] { // utime, stime: fields 14 and 15
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// TreeCPU returns the CPU time used so far by process pid and its
// children now running (a Postgres postmaster and its backends): a child
// that exited took its time with it.
func TreeCPU(pid int) (time.Duration, error) {
	total, err := CPU(pid)
	if err != nil {
		return 0, err
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	parent := strconv.Itoa(pid)
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := stat(child)
		if err != nil || f[1] != parent { // ppid: field 4
			continue
		}
		if c, err := CPU(child); err == nil {
			total += c
		}
	}
	return total, nil
}

// Parent returns the parent process ID of pid.
func Parent(pid int) (int, error) {
	f, err := stat(pid)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f[1])
}
