package badgerledger

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/ledgertest"
)

const crashEmail = "crash@example.com"

// TestCrashChild is the process TestCrash kills. It holds, settles, voids and grants in a
// loop from several goroutines, and prints "GRANT <reference>" only after Grant has returned,
// so every printed reference is an acknowledged grant. Beside them it keeps generations, whose
// store does not sync its writes, and prints "KEPT <request id>" once PutGenerations returned.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("LEDGER_CRASH_DIR")
	if dir == "" {
		t.Skip("run by TestCrash")
	}
	round := os.Getenv("LEDGER_CRASH_ROUND")
	ttl, _ := time.ParseDuration(os.Getenv("LEDGER_CRASH_HOLD_TTL"))
	sweep, _ := time.ParseDuration(os.Getenv("LEDGER_CRASH_SWEEP"))
	die := func(format string, args ...any) {
		fmt.Fprintf(os.Stdout, "ERROR "+format+"\n", args...)
		os.Exit(3)
	}
	s, err := Open(dir, Options{HoldTTL: ttl, SweepInterval: sweep})
	if err != nil {
		die("open: %v", err)
	}
	a, err := s.GetAccountByEmail(bg, crashEmail)
	if errors.Is(err, ledger.ErrNotFound) {
		a, err = s.CreateAccount(bg, crashEmail)
	}
	if err != nil {
		die("account: %v", err)
	}
	fmt.Fprintln(os.Stdout, "READY")

	var n atomic.Int64
	grant := func(rng *rand.Rand) {
		i := n.Add(1)
		ref := fmt.Sprintf("g-%s-%d", round, i)
		kind := ledger.KindGrant
		if i%2 == 0 {
			kind = ledger.KindPurchase
		}
		if _, err := s.Grant(bg, ledger.GrantRequest{AccountID: a.ID, Mode: ledger.Live, Kind: kind, Credits: 1 + rng.Int64N(3), Reference: ref}); err != nil {
			die("grant: %v", err)
		}
		fmt.Fprintln(os.Stdout, "GRANT", ref)
	}
	go func() {
		for i := 0; ; i++ {
			rid := fmt.Sprintf("k-%s-%d", round, i)
			t0 := time.Now()
			rec := ledger.GenerationRecord{AccountID: a.ID, RequestID: rid, Mode: ledger.Live, State: ledger.GenerationCompleted,
				Created: t0, Finished: t0, Expires: t0.Add(24 * time.Hour), Pieces: 1, Bytes: int64(len(rid))}
			if err := ledgertest.PutGeneration(s, rec, 0, [][]byte{crashKeptChunk(rid)}); err != nil {
				die("put generation: %v", err)
			}
			fmt.Fprintln(os.Stdout, "KEPT", rid)
		}
	}()
	for w := range 4 {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for {
				if rng.IntN(10) < 2 {
					grant(rng)
					continue
				}
				rid := fmt.Sprintf("q-%s-%d", round, n.Add(1))
				_, err := s.Hold(bg, ledger.HoldRequest{AccountID: a.ID, Mode: ledger.Live, RequestID: rid, Tool: "crash"})
				if errors.Is(err, ledger.ErrInsufficientCredits) {
					grant(rng)
					continue
				}
				if err != nil {
					die("hold: %v", err)
				}
				switch p := rng.IntN(10); {
				case p < 5:
					_, err = s.Settle(bg, a.ID, rid)
				case p < 8:
					_, err = s.Void(bg, a.ID, rid, "client_gone")
				case p < 9:
					// left open, for expiry
				default:
					if _, err = s.Settle(bg, a.ID, rid); err == nil {
						_, err = s.Void(bg, a.ID, rid, "repeat") // a repeat, changes nothing
					}
				}
				if err != nil {
					die("resolve: %v", err)
				}
			}
		}()
	}
	select {}
}

// TestCrash kills a child writing to the ledger with SIGKILL at random moments, many times.
// After each kill it reopens the directory and checks that Verify is clean and that every
// grant the child had acknowledged is there exactly once; on every other round it reopens with
// the clock two hours ahead and checks that Open voided every hold left open.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	acked := map[string]bool{}
	kept := map[string]bool{}
	killedBeforeReady := 0
	for round := range 20 {
		ttl, sweep := "1h", "30s"
		if round%3 == 1 {
			ttl, sweep = "50ms", "10ms" // the child's own sweep runs, and gets killed too
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.timeout=2m")
		cmd.Env = append(os.Environ(), "LEDGER_CRASH_DIR="+dir, "LEDGER_CRASH_ROUND="+strconv.Itoa(round),
			"LEDGER_CRASH_HOLD_TTL="+ttl, "LEDGER_CRASH_SWEEP="+sweep)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ready := make(chan struct{})
		done := make(chan struct{})
		var mu sync.Mutex
		var refs, keptIDs, errs []string
		go func() {
			defer close(done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				line := sc.Text()
				mu.Lock()
				switch {
				case line == "READY":
					close(ready)
				case strings.HasPrefix(line, "GRANT "):
					refs = append(refs, strings.TrimPrefix(line, "GRANT "))
				case strings.HasPrefix(line, "KEPT "):
					keptIDs = append(keptIDs, strings.TrimPrefix(line, "KEPT "))
				case strings.HasPrefix(line, "ERROR "):
					errs = append(errs, line)
				}
				mu.Unlock()
			}
		}()
		if round%4 == 3 {
			// Anywhere, Open and account creation included.
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
		} else {
			select {
			case <-ready:
			case <-done:
			case <-time.After(time.Minute):
			}
			time.Sleep(time.Duration(20+rng.IntN(250)) * time.Millisecond)
		}
		cmd.Process.Kill() // SIGKILL
		<-done
		cmd.Wait()
		mu.Lock()
		if len(errs) > 0 {
			t.Fatalf("round %d: child failed: %v\n%s", round, errs, stderr.String())
		}
		select {
		case <-ready:
		default:
			killedBeforeReady++
		}
		for _, r := range refs {
			acked[r] = true
		}
		for _, r := range keptIDs {
			kept[r] = true
		}
		mu.Unlock()

		_, last := crashCheck(t, round, dir, acked, kept, -1, 0)
		if round%2 == 0 {
			crashCheck(t, round, dir, acked, kept, 0, last)
		}
	}
	t.Logf("%d rounds (%d killed before READY), %d acknowledged grants and %d kept generations all present",
		20, killedBeforeReady, len(acked), len(kept))
}

// crashCheck opens dir, checks it, and returns the number of holds that Open voided because
// the killed process had left them open ("restart"), and the last entry's seq. Every hold is
// resolved once Open returns: none of the killed process's holds may stay open. With
// wantRestartVoids >= 0 it checks that Open voided exactly that many, in the entries after seq
// after (a second Open voids nothing more). Every generation in kept must read back whole: the
// kept store's writes are not synced, but a killed process's writes are in the page cache.
func crashCheck(t *testing.T, round int, dir string, acked, kept map[string]bool, wantRestartVoids int, after uint64) (int, uint64) {
	t.Helper()
	s, err := Open(dir, quiet)
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer s.Close()
	if r, err := s.Verify(bg); err != nil || !r.OK {
		t.Fatalf("round %d: verify: %+v %v", round, r.Problems, err)
	}
	a, err := s.GetAccountByEmail(bg, crashEmail)
	if errors.Is(err, ledger.ErrNotFound) && len(acked) == 0 {
		return 0, 0 // killed before the account was durable
	}
	if err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
	for rid := range kept {
		rec, chunks, err := s.GetGeneration(bg, a.ID, rid, 0)
		if err != nil || len(chunks) != 1 || !bytes.Equal(chunks[0], crashKeptChunk(rid)) || rec.State != ledger.GenerationCompleted {
			t.Fatalf("round %d: kept generation %s after the kill: %+v %q %v", round, rid, rec, chunks, err)
		}
	}
	seen := map[string]int{}
	restartVoids := 0
	resolved := map[string]int{}
	holds := map[string]bool{}
	h := ledgertest.AllHistory(t, s, a.ID)
	for _, e := range h {
		if e.Reference != "" {
			seen[e.Reference]++
		}
		switch e.Kind {
		case ledger.KindHold:
			holds[e.RequestID] = true
		case ledger.KindSettle, ledger.KindVoid:
			resolved[e.RequestID]++
		}
		if e.Seq > after && e.Kind == ledger.KindVoid && e.Reason == "restart" {
			restartVoids++
		}
	}
	for rid := range holds {
		if resolved[rid] != 1 {
			t.Fatalf("round %d: hold %s resolved %d times after the restart, want once", round, rid, resolved[rid])
		}
	}
	for ref := range acked {
		if seen[ref] != 1 {
			t.Fatalf("round %d: acknowledged grant %s appears %d times", round, ref, seen[ref])
		}
	}
	for ref, n := range seen {
		if n != 1 {
			t.Fatalf("round %d: reference %s credited %d times", round, ref, n)
		}
	}
	// The de-duplication survives the crash too: replaying acknowledged references (a payment
	// provider retrying after the restart) credits nothing.
	before := ledgertest.MustBalance(t, s, a.ID)
	replayed := 0
	for ref := range acked {
		if replayed == 3 {
			break
		}
		replayed++
		r, err := s.Grant(bg, ledger.GrantRequest{AccountID: a.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 1, Reference: ref})
		if err != nil || !r.Repeated {
			t.Fatalf("round %d: replaying acknowledged reference %s: %+v %v, want Repeated", round, ref, r, err)
		}
	}
	b := ledgertest.MustBalance(t, s, a.ID)
	if !reflect.DeepEqual(b, before) {
		t.Fatalf("round %d: replaying references changed the balance from %+v to %+v", round, before, b)
	}
	if open := b.Balance - b.Available; open != 0 {
		t.Fatalf("round %d: %d holds still open after the restart, want 0: the killed process is gone", round, open)
	}
	if wantRestartVoids >= 0 && restartVoids != wantRestartVoids {
		t.Fatalf("round %d: the second Open voided %d holds, want %d", round, restartVoids, wantRestartVoids)
	}
	last := uint64(0)
	if len(h) > 0 {
		last = h[0].Seq
	}
	return restartVoids, last
}

// crashKeptChunk is the chunk TestCrashChild keeps for request id rid.
func crashKeptChunk(rid string) []byte { return []byte("the kept text of " + rid) }
