// Package pgtest runs a real PostgreSQL server for tests: Debian's server binaries, a data
// directory of its own under a temporary folder, a free loopback port. One server serves a whole
// test binary (Shared, stopped by Run from TestMain); each test gets a database of its own
// (NewDatabase), which is cheap. Tests that need the database to go away and come back stop and
// start the server (Server.Stop, Server.Start).
//
// It imports nothing of the ledger, so any package's tests can use it.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/internal/freeport"
	"github.com/caddy-textgen/textgen/internal/tier"
)

// InstallHint is what to run on a machine without PostgreSQL.
const InstallHint = "apt-get update && apt-get install -y postgresql"

// Server is one PostgreSQL server (a cluster) started by Start.
type Server struct {
	bin  string // folder of initdb, pg_ctl and postgres
	root string // temporary folder removed by Close
	data string // data directory, also the folder of the Unix socket
	port int
	// runAs is "postgres" when the tests run as root: initdb and pg_ctl refuse root.
	runAs string

	mu      sync.Mutex // serialises Stop, Start and Close
	running bool
	dbs     atomic.Int64
}

// findBin returns the folder of PostgreSQL's server binaries: Debian's per-version folder (the
// newest version if several are installed), else the folder of initdb on PATH.
func findBin() (string, error) {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	slices.SortFunc(found, func(a, b string) int { return version(b) - version(a) })
	if len(found) > 0 {
		return filepath.Dir(found[0]), nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb, no initdb on PATH): install it with `%s`", InstallHint)
}

// version is the major version in a Debian path /usr/lib/postgresql/N/bin/initdb.
func version(p string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
	return n
}

// freePort is a free port outside the kernel's ephemeral range, so that none of the tests' own
// connections takes it while the server is stopped. Another process may still take it before
// the server binds it; Start then fails with the server's log.
func freePort() (int, error) {
	p, err := freeport.Pick(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// Start creates a cluster in a new temporary folder and starts it on a free loopback port.
// Durability settings are PostgreSQL's defaults (fsync and synchronous_commit on), so that
// benchmarks measure what production pays.
func Start() (*Server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, root: root, data: filepath.Join(root, "data")}
	fail := func(err error) (*Server, error) {
		os.RemoveAll(root)
		return nil, err
	}
	if os.Geteuid() == 0 {
		// initdb refuses to run as root: the cluster belongs to the postgres user.
		u, err := user.Lookup("postgres")
		if err != nil {
			return fail(fmt.Errorf("running as root needs the postgres user (%w): install PostgreSQL with `%s`", err, InstallHint))
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(root, uid, gid); err != nil {
			return fail(err)
		}
		s.runAs = "postgres"
	}
	if out, err := s.run("initdb", "-D", s.data, "--auth=trust", "-U", "postgres", "--encoding=UTF8", "--no-sync"); err != nil {
		return fail(fmt.Errorf("initdb: %w\n%s", err, out))
	}
	if s.port, err = freePort(); err != nil {
		return fail(err)
	}
	if err := s.Start(); err != nil {
		return fail(err)
	}
	return s, nil
}

// run runs one of the server's programs, as the postgres user when the tests run as root.
func (s *Server) run(prog string, args ...string) ([]byte, error) {
	name := filepath.Join(s.bin, prog)
	if s.runAs != "" {
		args = append([]string{"-u", s.runAs, "--", name}, args...)
		name = "runuser"
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = s.root
	return cmd.CombinedOutput()
}

// Start starts the server (again, after Stop) on its port and waits until it accepts
// connections.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s", s.port, s.data)
	out, err := s.run("pg_ctl", "-D", s.data, "-l", filepath.Join(s.data, "server.log"), "-w", "-t", "60", "-o", opts, "start")
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(s.data, "server.log"))
		return fmt.Errorf("starting PostgreSQL: %w\n%s\n%s", err, out, log)
	}
	s.running = true
	return nil
}

// Stop stops the server ("fast": open sessions are ended, nothing committed is lost) and waits
// until it is gone. Clients see their connections closed and new ones refused.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return nil
	}
	if out, err := s.run("pg_ctl", "-D", s.data, "-m", "fast", "-w", "stop"); err != nil {
		return fmt.Errorf("stopping PostgreSQL: %w\n%s", err, out)
	}
	s.running = false
	return nil
}

// Freeze stops every process of the server (SIGSTOP) without closing anything: connections stay
// open and nothing answers, as when the database's host hangs or the network drops packets.
// Thaw resumes it. Linux only (it finds the processes in /proc).
func (s *Server) Freeze() error { return s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server.
func (s *Server) Thaw() error { return s.signal(syscall.SIGCONT) }

// signal sends sig to the postmaster and its children.
func (s *Server) signal(sig syscall.Signal) error {
	b, err := os.ReadFile(filepath.Join(s.data, "postmaster.pid"))
	if err != nil {
		return err
	}
	pm, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return fmt.Errorf("postmaster.pid: %w", err)
	}
	pids := []int{pm}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		stat, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces, so read after its last ')'.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pm) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			pids = append(pids, pid)
		}
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil {
			return fmt.Errorf("signalling PostgreSQL process %d: %w", pid, err)
		}
	}
	return nil
}

// Close stops the server and removes its folder.
func (s *Server) Close() error {
	err := s.Stop()
	return errors.Join(err, os.RemoveAll(s.root))
}

// Port is the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// URL is the connection URL of database db on the server, as the superuser postgres.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// CreateDatabase creates a new, empty database and returns its name.
func (s *Server) CreateDatabase(ctx context.Context) (string, error) {
	name := fmt.Sprintf("test_%d_%d", os.Getpid(), s.dbs.Add(1))
	return name, s.admin(ctx, "CREATE DATABASE "+name)
}

// DropDatabase drops database name, ending its sessions first.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	return s.admin(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// admin runs one statement on the maintenance database.
func (s *Server) admin(ctx context.Context, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

var (
	shared    *Server
	sharedErr error
	sharedMu  sync.Mutex
)

// Shared returns the test binary's server, starting it on first use. It fails the test when
// PostgreSQL is missing or does not start (it never skips: the tests need the real thing).
func Shared(t testing.TB) *Server {
	t.Helper()
	tier.Full(t, "a real PostgreSQL server")
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedErr == nil {
		shared, sharedErr = Start()
	}
	if sharedErr != nil {
		t.Fatalf("pgtest: %v", sharedErr)
	}
	return shared
}

// NewDatabase creates a fresh database on the shared server and returns its URL; the database
// is dropped when the test ends (after the cleanups registered later, such as closing a pool).
func NewDatabase(t testing.TB) string {
	t.Helper()
	s := Shared(t)
	name, err := s.CreateDatabase(context.Background())
	if err != nil {
		t.Fatalf("pgtest: creating a database: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Start(); err != nil { // a test may leave the server stopped
			t.Errorf("pgtest: %v", err)
			return
		}
		if err := s.DropDatabase(context.Background(), name); err != nil {
			t.Errorf("pgtest: dropping %s: %v", name, err)
		}
	})
	return s.URL(name)
}

// Run runs the tests of m and then stops and removes the shared server, if a test started it.
// Call it from TestMain: os.Exit(pgtest.Run(m)).
func Run(m *testing.M) int {
	code := m.Run()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		if err := shared.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", strings.TrimSpace(err.Error()))
			if code == 0 {
				code = 1
			}
		}
		shared = nil
	}
	return code
}
