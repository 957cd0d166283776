//go:build linux

// Package disktest gives tests a small real file system that they can fill up: a tmpfs of a
// chosen size, mounted for one test. The full-disk tests of the ledger and of the server run on
// it, so what they prove is what a real full disk does (ENOSPC, and SIGBUS for a write through
// a memory map), not what a fake says.
package disktest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
)

// inNamespace is set in the environment of a test binary that Run re-executed in a user and
// mount namespace of its own.
const inNamespace = "TEXTGEN_DISKTEST_USERNS"

// Run mounts a tmpfs of size bytes on a fresh directory and calls f with it; the file system is
// unmounted when f returns. Mounting needs CAP_SYS_ADMIN: as root (CI) it mounts directly;
// otherwise it runs this one test again in a user and mount namespace of its own
// (`unshare --user --map-root-user --mount`, from util-linux), where it may mount, and reports
// that run's result. It never skips: a machine that allows neither fails the test, saying why.
func Run(t *testing.T, size int64, f func(t *testing.T, dir string)) {
	t.Helper()
	dir, err := os.MkdirTemp("", "textgen-disk-")
	if err != nil {
		t.Fatal(err)
	}
	err = syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", size))
	if err == nil {
		// A cleanup, not a defer: it runs after the cleanups f registers (a store's Close).
		t.Cleanup(func() {
			// Detached if it is busy: a store closed on a full disk keeps its files open (see
			// the ledger's Close) until the test binary exits.
			if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmounting the test file system %s: %v", dir, err)
			}
			os.Remove(dir)
		})
		f(t, dir)
		return
	}
	defer os.Remove(dir)
	if !errors.Is(err, syscall.EPERM) || os.Getenv(inNamespace) != "" {
		t.Fatalf("mounting a %d-byte tmpfs on %s: %v", size, dir, err)
	}
	unshare, lerr := exec.LookPath("unshare")
	if lerr != nil {
		t.Fatalf("mounting a tmpfs needs root, or unshare (util-linux) to run the test in a namespace of its own: %v; %v", err, lerr)
	}
	exe, _ := os.Executable()
	cmd := exec.Command(unshare, "--user", "--map-root-user", "--mount", exe,
		"-test.run", "^"+regexp.QuoteMeta(t.Name())+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), inNamespace+"=1")
	cmd.Dir, _ = os.Getwd()
	out, rerr := cmd.CombinedOutput()
	t.Logf("run again in a user and mount namespace of its own:\n%s", out)
	if rerr != nil {
		t.Fatalf("the test failed in its namespace: %v", rerr)
	}
}

// Fill writes a file into dir until its file system is full and returns a func that removes it.
func Fill(t testing.TB, dir string) (remove func()) {
	t.Helper()
	name := filepath.Join(dir, "filler")
	fh, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	for {
		if _, err := fh.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				fh.Close()
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	// The last megabyte's remainder, byte by byte at most 4 KiB at a time.
	small := buf[:4096]
	for {
		if _, err := fh.Write(small); err != nil {
			break
		}
	}
	if err := fh.Close(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	return func() {
		if err := os.Remove(name); err != nil {
			t.Errorf("removing the filler: %v", err)
		}
	}
}

// Free returns the bytes free on dir's file system.
func Free(t testing.TB, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}
