package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// restartDelay is how long a supervisor waits before restarting a worker
// process that exited; a process that keeps failing within a minute of its
// start waits twice as long each time, up to maxRestartDelay.
const (
	restartDelay    = time.Second
	maxRestartDelay = 15 * time.Second
)

// fleet runs the worker processes of a phase: one supervisor goroutine per
// slot keeps a process running in it, restarting it after it exits, until
// the fleet stops.
type fleet struct {
	exe    string
	verb   string   // the subcommand its processes run: "worker" when empty
	args   []string // common worker flags
	logDir string
	ev     *events

	mu       sync.Mutex
	slots    []*slot
	stopping bool
	wg       sync.WaitGroup
}

// slot is one worker position; its process changes with each restart.
type slot struct {
	name    string
	cur     string // name of the current process: slot name and start count
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	exited  chan struct{} // closed when the current process is reaped
	expect  string        // the fault that is about to end the process, if any
	mode    []string      // flags of this slot's processes for the whole phase (batch handlers)
	extra   []string      // flags of this slot's processes only, after the common ones
	starts  int
	crashes int // exits nobody asked for
}

func newFleet(exe string, args []string, logDir string, ev *events, n int) *fleet {
	f := &fleet{exe: exe, args: args, logDir: logDir, ev: ev}
	for i := range n {
		f.slots = append(f.slots, &slot{name: fmt.Sprintf("w%d", i+1)})
	}
	return f
}

// start launches every slot's supervisor.
func (f *fleet) start(ctx context.Context) {
	for _, s := range f.slots {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.supervise(ctx, s)
		}()
	}
}

func (f *fleet) supervise(ctx context.Context, s *slot) {
	delay := restartDelay
	for {
		f.mu.Lock()
		if f.stopping || ctx.Err() != nil {
			f.mu.Unlock()
			return
		}
		started := time.Now()
		err := f.launch(s)
		exited := s.exited
		f.mu.Unlock()
		if err != nil {
			f.ev.note("worker %s: start failed: %v", s.name, err)
		} else {
			<-exited
		}
		f.mu.Lock()
		stopping, crashed := f.stopping, s.expect == ""
		f.mu.Unlock()
		if stopping {
			return
		}
		switch {
		case err == nil && !crashed, time.Since(started) > time.Minute:
			delay = restartDelay
		default:
			delay = min(2*delay, maxRestartDelay)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// launch starts s's next process; f.mu is held.
func (f *fleet) launch(s *slot) error {
	logf, err := os.OpenFile(filepath.Join(f.logDir, s.name+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	s.starts++
	name := fmt.Sprintf("%s.%d", s.name, s.starts)
	verb := f.verb
	if verb == "" {
		verb = "worker"
	}
	cmd := exec.Command(f.exe, append(append(append([]string{verb, "-name", name}, f.args...), s.mode...), s.extra...)...)
	cmd.Stderr = logf
	// Its own process group, so a Ctrl-C on the soak's terminal reaches
	// the driver only, which then stops the workers itself; and a kill
	// if the driver's thread dies without stopping them (stdin EOF is the
	// other safety net).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	s.cmd, s.stdin, s.expect, s.cur = cmd, stdin, "", name
	s.exited = make(chan struct{})
	exited := s.exited
	f.ev.note("worker %s: started (pid %d)", name, cmd.Process.Pid)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			f.ev.line(name, sc.Text())
		}
		err := cmd.Wait()
		logf.Close()
		f.mu.Lock()
		expect := s.expect
		if expect == "" && !f.stopping {
			s.crashes++
		}
		f.mu.Unlock()
		f.ev.gone(name)
		switch {
		case expect != "":
			f.ev.note("worker %s: exited after %s (%v)", name, expect, exitText(err))
		case f.isStopping():
			f.ev.note("worker %s: stopped (%v)", name, exitText(err))
		default:
			f.ev.note("worker %s: EXITED UNEXPECTEDLY (%v); see %s", name, exitText(err), filepath.Join(f.logDir, s.name+".log"))
			f.ev.unexpectedExit()
		}
		close(exited)
	}()
	return nil
}

func (f *fleet) isStopping() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopping
}

func exitText(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// signal sends sig to the process in slot i as the fault named why, and
// returns its pid and a channel closed when it has exited.
func (f *fleet) signal(i int, sig syscall.Signal, why string) (int, <-chan struct{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.slots[i]
	if s.cmd == nil || s.cmd.Process == nil {
		return 0, nil, fmt.Errorf("worker %s is not running", s.name)
	}
	select {
	case <-s.exited:
		return 0, nil, fmt.Errorf("worker %s is between restarts", s.name)
	default:
	}
	s.expect = why
	if err := s.cmd.Process.Signal(sig); err != nil {
		return 0, nil, err
	}
	return s.cmd.Process.Pid, s.exited, nil
}

// pause sends SIGSTOP or SIGCONT (sig) to the process in slot i, which
// keeps running (its supervisor sees no exit), and returns its pid.
func (f *fleet) pause(i int, sig syscall.Signal) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.slots[i]
	if s.cmd == nil || s.cmd.Process == nil {
		return 0, fmt.Errorf("worker %s is not running", s.name)
	}
	select {
	case <-s.exited:
		return 0, fmt.Errorf("worker %s exited", s.name)
	default:
	}
	return s.cmd.Process.Pid, s.cmd.Process.Signal(sig)
}

// slotOf returns the index of the slot whose current process is proc.
func (f *fleet) slotOf(proc string) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range f.slots {
		if s.cur == proc {
			return i, true
		}
	}
	return 0, false
}

// running returns the slots whose process is running, by index, with the
// current process's name.
func (f *fleet) running() map[int]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int]string{}
	for i, s := range f.slots {
		if s.exited == nil {
			continue
		}
		select {
		case <-s.exited:
		default:
			out[i] = s.cur
		}
	}
	return out
}

// stop ends every process gracefully (SIGTERM), kills those still running
// after grace, and waits for the supervisors.
func (f *fleet) stop(grace time.Duration) {
	f.mu.Lock()
	f.stopping = true
	var waits []chan struct{}
	for _, s := range f.slots {
		if s.cmd == nil || s.exited == nil {
			continue
		}
		select {
		case <-s.exited:
			continue
		default:
		}
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		waits = append(waits, s.exited)
	}
	f.mu.Unlock()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	for _, w := range waits {
		select {
		case <-w:
		case <-timer.C:
			f.mu.Lock()
			for _, s := range f.slots {
				if s.cmd != nil && s.cmd.Process != nil {
					_ = s.cmd.Process.Kill()
				}
			}
			f.mu.Unlock()
			<-w
		}
	}
	f.wg.Wait()
}

// crashes returns how many worker processes exited without being asked to.
func (f *fleet) crashes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.slots {
		n += s.crashes
	}
	return n
}

// events collects what the worker processes report on stdout (see emit in
// worker.go) and the soak's own timeline.
type events struct {
	start time.Time
	out   io.Writer
	log   io.Writer // every worker event line, for the phase's log

	mu          sync.Mutex
	dups        map[string]int                  // job ID → duplicates absorbed by the claim
	parks       map[string]int                  // job ID → parks reported by the worker
	finishes    map[string]int                  // "ack/why" → count
	runs        map[string]int                  // job ID → deliveries that ended in the worker
	inflight    map[string]int                  // process → jobs in hand: started and not yet acknowledged
	jobsIn      map[string]map[string]bool      // process → the IDs of its jobs in hand
	onStart     func(proc, id, delivery string) // called with e.mu held
	watch       func(proc string, f []string)   // every event line's fields, called with e.mu held
	onRelay     func(proc string, f []string)   // a relay process's counters (relay.go), called with e.mu held
	renewOK     int
	renewFail   int
	ackFails    int
	startRetry  int
	unexpected  int
	lastFinish  time.Time
	exitsWithOK int
	stalls      stallTally
	pauses      map[string]int           // dependency → pauses reported by the workers
	resumes     map[string]int           // dependency → pauses that ended with the dependency back
	longest     map[string]time.Duration // dependency → the longest pause
}

func newEvents(out, log io.Writer) *events {
	return &events{
		start: time.Now(), out: out, log: log,
		dups: map[string]int{}, parks: map[string]int{}, finishes: map[string]int{}, runs: map[string]int{},
		inflight: map[string]int{}, jobsIn: map[string]map[string]bool{}, pauses: map[string]int{}, resumes: map[string]int{}, longest: map[string]time.Duration{},
	}
}

// note prints a timeline line.
func (e *events) note(format string, args ...any) {
	at := time.Since(e.start).Seconds()
	msg := fmt.Sprintf(format, args...)
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintf(e.out, "[%6.1fs] %s\n", at, msg)
	fmt.Fprintf(e.log, "%8.3f soak %s\n", at, msg)
}

// gone forgets the jobs in flight in a process that exited.
func (e *events) gone(proc string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.inflight, proc)
	delete(e.jobsIn, proc)
}

// busy returns the jobs in hand in proc ("" for all processes) and
// how long ago a job last finished.
func (e *events) busy(proc string) (int, time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.inflight[proc]
	if proc == "" {
		n = sumMap(e.inflight)
	}
	return n, time.Since(e.lastFinish)
}

func (e *events) unexpectedExit() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unexpected++
}

// line handles one stdout line of worker proc.
func (e *events) line(proc, line string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintf(e.log, "%8.3f %s %s\n", time.Since(e.start).Seconds(), proc, line)
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "EVENT" {
		return
	}
	if e.watch != nil {
		e.watch(proc, f)
	}
	arg := func(i int) string {
		if i+2 < len(f) {
			return f[i+2]
		}
		return ""
	}
	switch f[1] {
	case "relay":
		if e.onRelay != nil {
			e.onRelay(proc, f[2:])
		}
	case "dup":
		e.dups[arg(0)]++
	case "park":
		e.parks[arg(0)]++
	case "start":
		e.inflight[proc]++
		if e.jobsIn[proc] == nil {
			e.jobsIn[proc] = map[string]bool{}
		}
		e.jobsIn[proc][arg(0)] = true
		if e.onStart != nil {
			e.onStart(proc, arg(0), arg(1))
		}
	case "finish":
		if arg(4) == "1" && e.inflight[proc] > 0 {
			e.inflight[proc]--
		}
		delete(e.jobsIn[proc], arg(0))
		e.finishes[arg(1)+"/"+arg(2)]++
		e.runs[arg(0)]++
		e.lastFinish = time.Now()
	case "renew":
		if arg(1) == "ok" {
			e.renewOK++
		} else {
			e.renewFail++
		}
	case "stall", "heal":
		e.stalls.event(f[1], f[2:], time.Now())
	case "ackfail":
		e.ackFails++
	case "startretry":
		e.startRetry++
	case "pause":
		e.pauses[arg(0)]++
	case "resume":
		if arg(2) == "true" {
			e.resumes[arg(0)]++
		}
		if d, err := time.ParseDuration(arg(1)); err == nil && d > e.longest[arg(0)] {
			e.longest[arg(0)] = d
		}
	case "exit":
		if arg(0) == "ok" {
			e.exitsWithOK++
		}
	}
}
