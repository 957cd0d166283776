package progress

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// clock is a test clock that moves only when told.
type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock               { return &clock{t: time.Date(2025, 1, 31, 12, 0, 0, 0, time.UTC)} }
func lines(b *bytes.Buffer) []string {
	return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}
func plain(c *clock, w io.Writer) *Reporter {
	return New(w, Options{Delay: 5 * time.Second, Interval: 5 * time.Second, Now: c.now})
}

func TestFormats(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{Count(0), "0"}, {Count(999), "999"}, {Count(1000), "1,000"}, {Count(1234567), "1,234,567"},
		{Count(-1234), "-1,234"},
		{Bytes(0), "0 B"}, {Bytes(1023), "1023 B"}, {Bytes(1536), "1.5 KiB"}, {Bytes(45<<20 + 300<<10), "45.3 MiB"},
		{Bytes(2800 << 20), "2.7 GiB"}, {Bytes(3 << 40), "3.0 TiB"},
		{Duration(0), "0s"}, {Duration(42*time.Second + 400*time.Millisecond), "42s"}, {Duration(72 * time.Second), "1m12s"},
		{Duration(59*time.Minute + 59*time.Second + 600*time.Millisecond), "1h00m"}, {Duration(2*time.Hour + 5*time.Minute + 20*time.Second), "2h05m"},
		{Duration(-time.Second), "0s"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestPlainLines: without a terminal, nothing before the delay, then a line at most every
// interval with the rate since the first count and the time left at that rate, and a final line
// with the whole step's figures.
func TestPlainLines(t *testing.T) {
	c := newClock()
	var out bytes.Buffer
	r := plain(c, &out)
	r.Start("verifying", "accounts")
	c.add(2 * time.Second) // preparing: the rate's clock starts at the first count
	r.Set(0, 1_000_000)
	c.add(2 * time.Second)
	r.Set(16_000, 1_000_000) // 4 s after the start: before the delay
	if out.Len() != 0 {
		t.Fatalf("a line before the delay: %q", out.String())
	}
	c.add(3 * time.Second)
	r.Set(40_000, 1_000_000) // 40,000 in 5 s since the first count: 8,000/s, 120 s left for 960,000
	c.add(time.Second)
	r.Set(48_000, 1_000_000) // within the interval: nothing
	c.add(4 * time.Second)
	r.Tick() // the interval has passed without a new count: 48,000 in 10 s since the first
	c.add(time.Second)
	r.Set(1_000_000, 1_000_000) // within the interval
	c.add(10 * time.Second)
	r.Done() // 1,000,000 in 21 s since the first count, 23 s since the start
	want := []string{
		"verifying: 40,000 of 1,000,000 accounts (4%), 8,000/s, 2m00s left",
		"verifying: 48,000 of 1,000,000 accounts (4%), 4,800/s, 3m18s left",
		"verifying: 1,000,000 accounts in 23s (47,619/s)",
	}
	if got := lines(&out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestQuickStepIsQuiet: a step that ends before the delay writes nothing, not even its final
// line; neither does a reporter without a writer.
func TestQuickStepIsQuiet(t *testing.T) {
	c := newClock()
	var out bytes.Buffer
	r := plain(c, &out)
	r.Start("verifying", "accounts")
	r.Set(3, 3)
	c.add(time.Second)
	r.Done()
	r.StartBytes("restoring")
	r.Add(100)
	r.Close()
	if out.Len() != 0 {
		t.Errorf("a quick command wrote %q", out.String())
	}
	q := New(nil, Options{Now: c.now})
	q.Start("verifying", "accounts")
	q.Set(1, 2)
	q.Done()
}

// TestUnknownTotal: bytes without a total show the amount, the rate and the time so far; a step
// with no count at all shows its time.
func TestUnknownTotal(t *testing.T) {
	c := newClock()
	var out bytes.Buffer
	r := New(&out, Options{Now: c.now}) // every count writes
	r.StartBytes("downloading the backup")
	r.Set(0, -1)
	w := r.Counter()
	c.add(2 * time.Second)
	w.Write(make([]byte, 3<<20))
	r.Start("opening the Badger ledger", "") // ends the download as done
	c.add(90 * time.Second)
	r.Tick()
	r.Done()
	want := []string{
		"downloading the backup: 0 B, 0s so far",
		"downloading the backup: 3.0 MiB, 1.5 MiB/s, 2s so far",
		"downloading the backup: 3.0 MiB in 2s (1.5 MiB/s)",
		"opening the Badger ledger: 1m30s so far",
		"opening the Badger ledger: done in 1m30s",
	}
	if got := lines(&out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestReader: a Reader counts what is read through it, of a known total.
func TestReader(t *testing.T) {
	c := newClock()
	var out bytes.Buffer
	r := New(&out, Options{Delay: time.Second, Interval: time.Second, Now: c.now})
	r.StartBytes("restoring")
	r.Set(0, 4<<20)
	rd := r.Reader(strings.NewReader(strings.Repeat("x", 4<<20)))
	buf := make([]byte, 1<<20)
	for range 4 {
		c.add(time.Second)
		if _, err := io.ReadFull(rd, buf); err != nil {
			t.Fatal(err)
		}
	}
	r.Done()
	want := []string{
		"restoring: 1.0 MiB of 4.0 MiB (25%), 1.0 MiB/s, 3s left",
		"restoring: 2.0 MiB of 4.0 MiB (50%), 1.0 MiB/s, 2s left",
		"restoring: 3.0 MiB of 4.0 MiB (75%), 1.0 MiB/s, 1s left",
		"restoring: 4.0 MiB of 4.0 MiB (100%), 1.0 MiB/s, finishing",
		"restoring: 4.0 MiB in 4s (1.0 MiB/s)",
	}
	if got := lines(&out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestBar: on a terminal one line is redrawn in place and ended by a newline: with the final
// figures when the step is done, as it was when it stopped; it is cut to the terminal's width.
func TestBar(t *testing.T) {
	c := newClock()
	var out bytes.Buffer
	r := New(&out, Options{TTY: true, Delay: time.Second, Interval: 200 * time.Millisecond, Columns: 100, Now: c.now})
	r.Start("verifying", "accounts")
	r.Set(0, 1000)
	c.add(time.Second)
	r.Set(410, 1000)
	c.add(100 * time.Millisecond)
	r.Set(450, 1000) // within the interval
	c.add(time.Second)
	r.Set(1000, 1000)
	r.Done()
	want := "\rverifying  [########------------]   41%  410/1,000 accounts  410/s  1s left\x1b[K" +
		"\rverifying  [####################]  100%  1,000/1,000 accounts  476/s  finishing\x1b[K" +
		"\rverifying  [####################]  100%  1,000/1,000 accounts  476/s  done in 2s\x1b[K\n"
	if out.String() != want {
		t.Errorf("bar:\n%q\nwant\n%q", out.String(), want)
	}

	out.Reset()
	r = New(&out, Options{TTY: true, Columns: 30, Now: c.now})
	r.StartBytes("downloading the backup")
	r.Set(2048, -1)
	r.Close()
	if want := "\rdownloading the backup  2.0 K\x1b[K\n"; out.String() != want {
		t.Errorf("cut bar, stopped:\n%q\nwant\n%q", out.String(), want)
	}
}

// TestFile: a command's reporter on a file that is not a terminal writes plain lines, every
// count with the tests' interval of 0; its ticker writes the step in hand while no count comes,
// until Close; quiet writes nothing.
func TestFile(t *testing.T) {
	t.Setenv(IntervalEnv, "0s")
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := forFile(f, false)
	if r.o.TTY || r.Interval() != 0 {
		t.Fatalf("options %+v, want plain lines at interval 0", r.o)
	}
	r.Start("opening the Badger ledger", "")
	// The ticker's line (a bound that is a safety net, not a timing assertion).
	for i := 0; ; i++ {
		if b, _ := os.ReadFile(f.Name()); strings.Contains(string(b), "opening the Badger ledger: ") {
			break
		}
		if i == 1000 {
			t.Fatal("the ticker wrote nothing in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.Start("verifying", "accounts")
	r.Set(1, 2)
	r.Done()
	r.Close()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\nverifying: 1 of 2 accounts (50%)") || !strings.Contains(string(b), "\nverifying: 2 accounts in ") {
		t.Errorf("lines:\n%s", b)
	}
	n := len(b)
	r.Tick()
	if b, _ := os.ReadFile(f.Name()); len(b) != n {
		t.Errorf("a closed reporter wrote %q", b[n:])
	}

	q := forFile(f, true)
	q.Start("verifying", "accounts")
	q.Set(1, 2)
	q.Close()
	if b, _ := os.ReadFile(f.Name()); len(b) != n {
		t.Errorf("a quiet reporter wrote %q", b[n:])
	}
}
