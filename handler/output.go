package handler

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"
)

// MaxResultBytes bounds the JSON of a job's result ([Job.SetResult]).
const MaxResultBytes = 64 << 10

// MaxProgressMessage bounds a progress message ([Job.Progress]), in bytes;
// a longer one is cut.
const MaxProgressMessage = 256

// ResultTooBigError is [Job.SetResult]'s error for a result whose JSON is
// over [MaxResultBytes].
type ResultTooBigError struct {
	// Size is the JSON's size in bytes.
	Size int
}

func (e *ResultTooBigError) Error() string {
	return fmt.Sprintf("job result of %d bytes is over handler.MaxResultBytes (%d): store the data elsewhere and return where it is", e.Size, MaxResultBytes)
}

// Progress is how far a running job got, as its handler last said with
// [Job.Progress].
type Progress struct {
	// Percent is 0 to 100.
	Percent int
	// Message is the handler's note, at most MaxProgressMessage bytes.
	Message string
	// At is when the handler said it.
	At time.Time
}

// output is what a handler reports besides its error: the job's result
// ([]byte) and its last progress (*Progress). Observers read it
// concurrently with the handler. atomic.Value, not atomic.Pointer: a Job
// may be copied (tests do), and atomic.Pointer forbids it.
type output struct {
	result   atomic.Value
	progress atomic.Value
}

// SetResult records v, JSON-encoded, as the job's result, for observers
// such as the job log (joblog/pgjoblog) to keep; a later call replaces
// it. It fails, recording nothing, when v does not encode or its JSON is
// over [MaxResultBytes] ([ResultTooBigError]).
func (j *Job) SetResult(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("job result: %w", err)
	}
	if len(b) > MaxResultBytes {
		return &ResultTooBigError{Size: len(b)}
	}
	j.out.result.Store(b)
	return nil
}

// Result returns the JSON of the job's result ([Job.SetResult]), or nil
// when the handler set none.
func (j *Job) Result() json.RawMessage {
	b, _ := j.out.result.Load().([]byte)
	return b
}

// Progress records how far the job got: pct (clamped to 0..100) and a
// short message (cut to [MaxProgressMessage] bytes). It only stores them:
// observers (the job log writes at most one progress a second per job)
// read the last one. Safe to call often, and from several goroutines.
func (j *Job) Progress(pct int, msg string) {
	pct = min(max(pct, 0), 100)
	if len(msg) > MaxProgressMessage {
		n := MaxProgressMessage
		for n > 0 && msg[n]&0xC0 == 0x80 {
			n--
		}
		msg = msg[:n]
	}
	j.out.progress.Store(&Progress{Percent: pct, Message: msg, At: time.Now()})
}

// LastProgress returns the last progress the handler recorded
// ([Job.Progress]), and false when it recorded none.
func (j *Job) LastProgress() (Progress, bool) {
	if p, ok := j.out.progress.Load().(*Progress); ok {
		return *p, true
	}
	return Progress{}, false
}
