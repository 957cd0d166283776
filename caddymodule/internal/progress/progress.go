// Package progress shows how far a long command has come (ledger verify and migrate, backup,
// restore): on a terminal, a bar redrawn in place on one line; elsewhere (a log file, CI), a
// plain line every few seconds. It writes only to the writer it is given, standard error for the
// commands, so that what they print on standard output (their --json object) stays as it is.
//
// A command runs in steps (Start, StartBytes); each is fed counts (Set, Add, or a Reader or
// Counter that counts bytes) and shows what is done, of how much when the total is known, the
// rate, and the time left. A step that ends before its first output is due (Options.Delay)
// writes nothing, so a quick command stays quiet.
//
// It imports nothing of Caddy or the ledger: the ledger's engines report through a plain
// func(done, total int64), which Set is.
//
// For tests only: the environment variable TEXTGEN_PROGRESS_INTERVAL (a Go duration; "0s"
// writes on every count) sets the delay and the interval of Stderr's reporter, so that a test of
// a small ledger sees its lines.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// IntervalEnv is the environment variable that sets Stderr's delay and interval, for tests.
const IntervalEnv = "TEXTGEN_PROGRESS_INTERVAL"

// Options say how a Reporter writes.
type Options struct {
	// TTY draws a bar on one line, redrawn in place ("\r", then erase to the line's end), and
	// ends it with a newline when the step ends; otherwise each output is a plain line.
	TTY bool
	// Delay is how long a step runs before its first output; Interval is the least time
	// between two outputs of a step. Zero writes on every count.
	Delay, Interval time.Duration
	// Columns is the terminal's width: a bar's line is cut to one less (TTY only; 0: 80).
	Columns int
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Defaults are the options for a terminal (tty), or for a log: a bar after a second, redrawn
// five times a second; a line after five seconds, then every five seconds.
func Defaults(tty bool) Options {
	if tty {
		return Options{TTY: true, Delay: time.Second, Interval: 200 * time.Millisecond, Columns: 80}
	}
	return Options{Delay: 5 * time.Second, Interval: 5 * time.Second}
}

// Reporter writes the progress of one step at a time. Its methods may be called from several
// goroutines.
type Reporter struct {
	mu sync.Mutex
	w  io.Writer // nil: writes nothing
	o  Options
	st *step

	stop     chan struct{} // closes the ticker of Stderr's reporter
	stopped  chan struct{}
	stopOnce sync.Once
}

// step is what a Reporter knows of the step in hand.
type step struct {
	label, unit string
	bytes       bool
	start       time.Time
	done, total int64 // total < 0: not known
	// The rate's clock starts at the first count (t0, d0), so that a step's preparation (such
	// as counting its records) does not slow its rate.
	counted bool
	t0      time.Time
	d0      int64
	shown   time.Time // the last output; zero: none yet
}

// New returns a Reporter that writes to w (nil: nowhere).
func New(w io.Writer, o Options) *Reporter {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Columns <= 0 {
		o.Columns = 80
	}
	return &Reporter{w: w, o: o}
}

// Stderr is a command's Reporter: on standard error, a bar when it is a terminal (and TERM is not
// "dumb"), plain lines otherwise, nothing at all when quiet. A ticker redraws it while no count
// comes (a step that waits on a database), until Close.
func Stderr(quiet bool) *Reporter { return forFile(os.Stderr, quiet) }

// forFile is Stderr's Reporter on f.
func forFile(f *os.File, quiet bool) *Reporter {
	if quiet {
		return New(nil, Options{})
	}
	fd := int(f.Fd())
	tty := term.IsTerminal(fd) && os.Getenv("TERM") != "dumb"
	o := Defaults(tty)
	if tty {
		if w, _, err := term.GetSize(fd); err == nil && w > 0 {
			o.Columns = w
		}
	}
	if d, err := time.ParseDuration(os.Getenv(IntervalEnv)); err == nil && d >= 0 {
		o.Delay, o.Interval = d, d
	}
	r := New(f, o)
	r.tick(min(max(o.Interval, 50*time.Millisecond), time.Second))
	return r
}

// tick calls Tick every period until Close.
func (r *Reporter) tick(period time.Duration) {
	r.stop, r.stopped = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(r.stopped)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-t.C:
				r.Tick()
			}
		}
	}()
}

// Interval is the least time between two outputs of a step.
func (r *Reporter) Interval() time.Duration { return r.o.Interval }

// Start ends the step in hand, as done, and starts one that counts unit ("accounts").
func (r *Reporter) Start(label, unit string) { r.begin(label, unit, false) }

// StartBytes ends the step in hand, as done, and starts one that counts bytes.
func (r *Reporter) StartBytes(label string) { r.begin(label, "", true) }

func (r *Reporter) begin(label, unit string, bytes bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.end(true)
	r.st = &step{label: label, unit: unit, bytes: bytes, start: r.o.Now(), total: -1}
}

// Set says that done of total are done (total < 0: not known). Its type is a ledger.ProgressFunc.
func (r *Reporter) Set(done, total int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st == nil {
		return
	}
	now := r.o.Now()
	r.count(now, done)
	r.st.done, r.st.total = done, total
	r.maybe(now)
}

// Add says that n more are done.
func (r *Reporter) Add(n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st == nil {
		return
	}
	now := r.o.Now()
	r.count(now, r.st.done)
	r.st.done += n
	r.maybe(now)
}

// count starts the rate's clock at the step's first count, when done were done.
func (r *Reporter) count(now time.Time, done int64) {
	if !r.st.counted {
		r.st.counted, r.st.t0, r.st.d0 = true, now, done
	}
}

// Tick writes the step again if an output is due, so that a step without counts for a while
// still shows its time.
func (r *Reporter) Tick() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st != nil {
		r.maybe(r.o.Now())
	}
}

// Done ends the step in hand as done: with its final figures, if anything of it was written.
func (r *Reporter) Done() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.end(true)
}

// Stop ends the step in hand without its final figures (it failed): a bar's line is ended, so
// that an error message starts on a line of its own.
func (r *Reporter) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.end(false)
}

// Close stops the step in hand (Stop) and the ticker. Call it once the command is done.
func (r *Reporter) Close() {
	r.stopOnce.Do(func() {
		if r.stop != nil {
			close(r.stop)
			<-r.stopped
		}
	})
	r.Stop()
}

// Reader counts into the step in hand the bytes read through it.
func (r *Reporter) Reader(rd io.Reader) io.Reader { return countReader{rd, r} }

// Counter is a writer that counts into the step in hand the bytes written to it, and keeps
// nothing.
func (r *Reporter) Counter() io.Writer { return counter{r} }

type countReader struct {
	rd io.Reader
	r  *Reporter
}

func (c countReader) Read(p []byte) (int, error) {
	n, err := c.rd.Read(p)
	if n > 0 {
		c.r.Add(int64(n))
	}
	return n, err
}

type counter struct{ r *Reporter }

func (c counter) Write(p []byte) (int, error) {
	c.r.Add(int64(len(p)))
	return len(p), nil
}

// maybe writes the step if an output is due at now.
func (r *Reporter) maybe(now time.Time) {
	st := r.st
	if r.w == nil {
		return
	}
	if st.shown.IsZero() && now.Sub(st.start) < r.o.Delay || !st.shown.IsZero() && now.Sub(st.shown) < r.o.Interval {
		return
	}
	r.write(now, false)
}

// end ends the step in hand: done (its final figures) or not.
func (r *Reporter) end(done bool) {
	st := r.st
	if st == nil {
		return
	}
	defer func() { r.st = nil }()
	if r.w == nil || st.shown.IsZero() {
		return
	}
	switch {
	case done:
		if st.total >= 0 {
			st.done = max(st.done, st.total)
		}
		r.write(r.o.Now(), true)
	case r.o.TTY:
		fmt.Fprint(r.w, "\n")
	}
}

func (r *Reporter) write(now time.Time, final bool) {
	r.st.shown = now
	if !r.o.TTY {
		fmt.Fprintln(r.w, r.st.line(now, final))
		return
	}
	line := r.st.bar(now, final)
	if n := r.o.Columns - 1; len(line) > n {
		line = line[:n]
	}
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprint(r.w, "\r"+line+"\x1b[K"+end)
}

// line is a plain line:
//
//	verifying: 412,345 of 1,000,000 accounts (41%), 8,203/s, 1m12s left
//	downloading the backup: 1.2 GiB, 45.3 MiB/s, 27s so far
//	verifying: 1,000,000 accounts in 2m03s (8,130/s)        (the final one)
func (st *step) line(now time.Time, final bool) string {
	took := now.Sub(st.start)
	if !st.counted {
		if final {
			return st.label + ": done in " + Duration(took)
		}
		return st.label + ": " + Duration(took) + " so far"
	}
	rate, rated := st.rate(now)
	if final {
		s := st.label + ": " + st.amount(st.done) + " in " + Duration(took)
		if rated {
			s += " (" + st.rateText(rate) + ")"
		}
		return s
	}
	parts := []string{st.label + ": " + st.amount(st.done)}
	if st.total >= 0 {
		parts[0] = st.label + ": " + st.of() + " (" + st.percent() + ")"
	}
	if rated {
		parts = append(parts, st.rateText(rate))
	}
	return strings.Join(append(parts, st.left(now, rate, rated)), ", ")
}

// bar is a terminal's line:
//
//	verifying [########------------]  41%  412,345/1,000,000 accounts  8,203/s  1m12s left
//	downloading the backup  1.2 GiB  45.3 MiB/s  27s so far
func (st *step) bar(now time.Time, final bool) string {
	took := now.Sub(st.start)
	if !st.counted {
		if final {
			return st.label + "  done in " + Duration(took)
		}
		return st.label + "  " + Duration(took) + " so far"
	}
	parts := []string{st.label}
	if st.total >= 0 {
		const width = 20
		filled := width
		if st.total > 0 && st.done < st.total {
			filled = int(st.done * width / st.total)
		}
		parts = append(parts, "["+strings.Repeat("#", filled)+strings.Repeat("-", width-filled)+"]",
			fmt.Sprintf("%4s", st.percent()))
		if st.bytes {
			parts = append(parts, Bytes(st.done)+"/"+Bytes(st.total))
		} else {
			parts = append(parts, Count(st.done)+"/"+Count(st.total)+" "+st.unit)
		}
	} else {
		parts = append(parts, st.amount(st.done))
	}
	rate, rated := st.rate(now)
	if rated {
		parts = append(parts, st.rateText(rate))
	}
	if final {
		parts = append(parts, "done in "+Duration(took))
	} else {
		parts = append(parts, st.left(now, rate, rated))
	}
	return strings.Join(parts, "  ")
}

// rate is how many a second have been done since the first count; false until it is known.
func (st *step) rate(now time.Time) (float64, bool) {
	el := now.Sub(st.t0).Seconds()
	if el <= 0 || st.done <= st.d0 {
		return 0, false
	}
	return float64(st.done-st.d0) / el, true
}

// left is the time left at rate, when the total is known; else the time so far.
func (st *step) left(now time.Time, rate float64, rated bool) string {
	switch {
	case st.total >= 0 && st.done >= st.total:
		return "finishing"
	case st.total >= 0 && rated:
		return Duration(time.Duration(float64(st.total-st.done)/rate*float64(time.Second))) + " left"
	}
	return Duration(now.Sub(st.start)) + " so far"
}

func (st *step) amount(n int64) string {
	if st.bytes {
		return Bytes(n)
	}
	return Count(n) + " " + st.unit
}

func (st *step) of() string {
	if st.bytes {
		return Bytes(st.done) + " of " + Bytes(st.total)
	}
	return Count(st.done) + " of " + Count(st.total) + " " + st.unit
}

// percent is the share done, rounded down: 100% only when all is done.
func (st *step) percent() string {
	if st.total <= 0 || st.done >= st.total {
		return "100%"
	}
	return fmt.Sprintf("%d%%", max(st.done, 0)*100/st.total)
}

func (st *step) rateText(rate float64) string {
	if st.bytes {
		return Bytes(int64(rate)) + "/s"
	}
	if rate < 10 {
		return fmt.Sprintf("%.1f/s", rate)
	}
	return Count(int64(rate+0.5)) + "/s"
}

// Count writes n with a comma between thousands: 1,000,000.
func Count(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// Bytes writes n bytes in binary units with one decimal: 512 B, 1.5 KiB, 45.3 MiB, 2.6 GiB.
func Bytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, "KiB"
	for _, u := range []string{"MiB", "GiB", "TiB"} {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

// Duration writes d to the second: 42s, 1m12s, 2h05m (past an hour, to the minute).
func Duration(d time.Duration) string {
	d = max(d.Round(time.Second), 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
