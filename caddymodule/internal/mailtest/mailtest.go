// Package mailtest runs a real SMTP server for tests: mailpit (pinned to v1.27.11), which keeps
// every message it receives and serves them on an HTTP API. It is built once per machine into
// the test cache ($TEXTGEN_CACHE/mailpit-v1.27.11/mailpit; .ci/run installs it there) from a
// throwaway module that requires it, because `go install` of it is refused by the module proxy.
// Each Server listens on free loopback ports of its own, so two test runs never meet; Stop and
// Start take the SMTP server away and bring it back on the same ports with what it had received
// (its database is a file in the test's directory). NewTLS requires STARTTLS, with a
// certificate made for the test, and a login; NewImplicitTLS the same with TLS from the first
// byte instead of STARTTLS (as on port 465).
//
// It imports nothing of caddy-textgen but the binary cache, so any package's tests can use it.
package mailtest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/caddy-textgen/textgen/backends/ollamatest/gobin"
	"github.com/caddy-textgen/textgen/internal/freeport"
	"github.com/caddy-textgen/textgen/internal/tier"
)

// Version is the pinned mailpit.
const Version = "v1.27.11"

var program = gobin.Program{
	Module: "github.com/axllent/mailpit", Version: Version, Name: "mailpit",
	EnvOverride: "TEXTGEN_MAILPIT_BIN", BuildInModule: true,
}

// EnsureBinary returns the pinned mailpit, building it first when it is missing (about two
// minutes, once per machine). $TEXTGEN_MAILPIT_BIN names a binary to use instead.
func EnsureBinary() (string, error) { return program.Ensure() }

// Server is one mailpit process.
type Server struct {
	bin      string
	dir      string
	smtpPort int
	httpPort int

	extra []string       // more flags (NewTLS, NewImplicitTLS: TLS and a login)
	pool  *x509.CertPool // trusts the TLS certificate (NewTLS, NewImplicitTLS)

	mu    sync.Mutex
	cmd   *exec.Cmd
	logMu sync.Mutex
	log   bytes.Buffer
}

// New starts mailpit and stops it when the test ends. It fails the test when mailpit cannot be
// built or does not start (it never skips).
func New(t testing.TB) *Server {
	t.Helper()
	tier.Full(t, "a real SMTP server (mailpit)")
	s, err := Start(t.TempDir())
	if err != nil {
		t.Fatalf("mailtest: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// NewTLS is New with STARTTLS required (a certificate for 127.0.0.1 made for the test, which
// CertPool trusts) and a login required: user with password, nothing else.
func NewTLS(t testing.TB, user, password string) *Server {
	t.Helper()
	return newTLS(t, user, password, "--smtp-require-starttls")
}

// NewImplicitTLS is NewTLS with TLS from the first byte instead of STARTTLS: the SMTP port
// speaks nothing but TLS, as port 465 does, and a client that starts in plain text gets no
// greeting.
func NewImplicitTLS(t testing.TB, user, password string) *Server {
	t.Helper()
	return newTLS(t, user, password, "--smtp-require-tls")
}

// newTLS starts mailpit with the test's certificate, a login and require, the flag that says
// how TLS is required.
func newTLS(t testing.TB, user, password, require string) *Server {
	t.Helper()
	tier.Full(t, "a real SMTP server (mailpit)")
	dir := t.TempDir()
	pool, err := writeCert(dir)
	if err != nil {
		t.Fatalf("mailtest: %v", err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "auth"), []byte(user+":"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := start(dir, pool, "--smtp-tls-cert", filepath.Join(dir, "cert.pem"), "--smtp-tls-key", filepath.Join(dir, "key.pem"),
		require, "--smtp-auth-file", filepath.Join(dir, "auth"))
	if err != nil {
		t.Fatalf("mailtest: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// CertPool trusts the server's TLS certificate (NewTLS, NewImplicitTLS; nil otherwise).
func (s *Server) CertPool() *x509.CertPool { return s.pool }

// writeCert makes a self-signed certificate for 127.0.0.1 in dir (cert.pem, key.pem).
func writeCert(dir string) (*x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mailtest"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool, nil
}

// Start builds mailpit if needed and starts it with its database in dir.
func Start(dir string) (*Server, error) { return start(dir, nil) }

func start(dir string, pool *x509.CertPool, extra ...string) (*Server, error) {
	bin, err := EnsureBinary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 { // a free port can be taken by someone else before mailpit binds it
		ports, err := freeport.Pick(2)
		if err != nil {
			return nil, err
		}
		s := &Server{bin: bin, dir: dir, smtpPort: ports[0], httpPort: ports[1], extra: extra, pool: pool}
		if lastErr = s.Start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// Host is the SMTP server's host (127.0.0.1).
func (s *Server) Host() string { return "127.0.0.1" }

// SMTPPort is the SMTP server's port.
func (s *Server) SMTPPort() int { return s.smtpPort }

// APIURL is the base URL of mailpit's HTTP API and web interface.
func (s *Server) APIURL() string { return "http://127.0.0.1:" + strconv.Itoa(s.httpPort) }

// Start starts the server again (after Stop) on the same ports, with what it had received.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	args := append([]string{
		"--smtp", "127.0.0.1:" + strconv.Itoa(s.smtpPort),
		"--listen", "127.0.0.1:" + strconv.Itoa(s.httpPort),
		"--database", filepath.Join(s.dir, "mailpit.db"),
		"--disable-version-check", "--quiet"}, s.extra...)
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = &syncWriter{mu: &s.logMu, w: &s.log}, &syncWriter{mu: &s.logMu, w: &s.log}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting mailpit: %w", err)
	}
	s.cmd = cmd
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.smtpPort), 200*time.Millisecond)
		if err == nil {
			c.Close()
			if resp, err := http.Get(s.APIURL() + "/api/v1/messages"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					go func() { <-exited }()
					return nil
				}
			}
		}
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("mailpit exited at start: %s", s.logText())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			s.cmd = nil
			return fmt.Errorf("mailpit did not start on ports %d/%d: %s", s.smtpPort, s.httpPort, s.logText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the server; its database stays for Start. Safe when stopped.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	err := cmd.Process.Kill()
	// Wait until the port is free again, so that Start can bind it.
	for range 200 {
		c, derr := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.smtpPort), 100*time.Millisecond)
		if derr != nil {
			break
		}
		c.Close()
		time.Sleep(20 * time.Millisecond)
	}
	if errors.Is(err, os.ErrProcessDone) {
		err = nil
	}
	return err
}

// Address is one mailbox of a message.
type Address struct {
	Name    string `json:"Name"`
	Address string `json:"Address"`
}

// Message is one received message: its summary from the list, and its bodies once read.
type Message struct {
	ID      string    `json:"ID"`
	From    Address   `json:"From"`
	To      []Address `json:"To"`
	Subject string    `json:"Subject"`
	Text    string    `json:"Text"`
	HTML    string    `json:"HTML"`
}

// Messages returns every message received so far, newest first, with their bodies.
func (s *Server) Messages(ctx context.Context) ([]Message, error) {
	var list struct {
		Messages []Message `json:"messages"`
	}
	if err := s.get(ctx, "/api/v1/messages?limit=1000", &list); err != nil {
		return nil, err
	}
	for i := range list.Messages {
		if err := s.get(ctx, "/api/v1/message/"+list.Messages[i].ID, &list.Messages[i]); err != nil {
			return nil, err
		}
	}
	return list.Messages, nil
}

// To returns the messages sent to addr whose subject contains subject, newest first.
func (s *Server) To(ctx context.Context, addr, subject string) ([]Message, error) {
	all, err := s.Messages(ctx)
	if err != nil {
		return nil, err
	}
	var out []Message
	for _, m := range all {
		for _, to := range m.To {
			if strings.EqualFold(to.Address, addr) && strings.Contains(m.Subject, subject) {
				out = append(out, m)
				break
			}
		}
	}
	return out, nil
}

// WaitFor polls until a message to addr with subject in its subject has arrived and returns the
// newest; it fails the test after timeout.
func (s *Server) WaitFor(t testing.TB, addr, subject string, timeout time.Duration) Message {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ms, err := s.To(context.Background(), addr, subject)
		if err == nil && len(ms) > 0 {
			return ms[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("mailtest: no message to %s with %q in its subject after %s (last error: %v)", addr, subject, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *Server) get(ctx context.Context, path string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.APIURL()+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("mailpit %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func (s *Server) logText() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.log.String()
}

type syncWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
