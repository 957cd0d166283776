package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bookwormRecipe names the cached Debian root: change it when bookwormPackages changes, so that
// a stale cache is not used.
const bookwormRecipe = "bookworm-root-v1"

// bookwormPackages are installed into the root beside debootstrap's minimal base: systemd to
// boot it, curl to call the API inside, and the C++ runtime of the pinned Ollama.
const bookwormPackages = "systemd,systemd-sysv,dbus,ca-certificates,curl,libstdc++6,libgomp1"

// bookwormRoot returns the cached Debian bookworm root (debootstrap, about 2.5 minutes the
// first time), made in a temporary directory and renamed into place, so that a run stopped half
// way leaves no half-made root for the next.
func bookwormRoot(t *testing.T) string {
	t.Helper()
	final := filepath.Join(cacheDir(t), bookwormRecipe)
	if _, err := os.Stat(filepath.Join(final, "usr/lib/systemd/systemd")); err == nil {
		return final
	}
	mirror := os.Getenv("TEXTGEN_DEBIAN_MIRROR")
	if mirror == "" {
		mirror = "http://deb.debian.org/debian"
	}
	tmp := fmt.Sprintf("%s.tmp-%d", final, os.Getpid())
	os.RemoveAll(tmp)
	t.Logf("making the Debian bookworm root %s with debootstrap from %s (once per machine)", final, mirror)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+bookwormPackages,
		"bookworm", tmp, mirror)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		t.Fatalf("debootstrap: %v\n%s", err, tail(out, 4000))
	}
	// A persistent journal, as on a real server, so that what Caddy logs lands on disk.
	if err := os.MkdirAll(filepath.Join(tmp, "var/log/journal"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another run finished first: use its root.
		os.RemoveAll(tmp)
		if _, err2 := os.Stat(filepath.Join(final, "usr/lib/systemd/systemd")); err2 != nil {
			t.Fatalf("caching the root: %v", err)
		}
	}
	return final
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// container is a booted systemd-nspawn container of a copy of the Debian root, with a network
// of its own (only its loopback), so that two runs never meet on a port.
type container struct {
	t    *testing.T
	root string
	pid  int // the container's PID 1 (systemd), as this machine sees it
	cmd  *exec.Cmd
	log  *bytes.Buffer // nspawn's output: the boot console
	done chan struct{}
}

// bootContainer copies the cached root into a temporary directory, lets prepare add files to
// the copy, and boots it; the container is powered off and its copy removed when the test ends,
// whether it passed or not.
func bootContainer(t *testing.T, prepare func(root string)) *container {
	t.Helper()
	base := bookwormRoot(t)
	root := filepath.Join(t.TempDir(), "root")
	t.Logf("copying the root into %s", root)
	run(t, "", "cp", "-a", base, root)
	prepare(root)

	machine := fmt.Sprintf("textgen-%d", os.Getpid())
	c := &container{t: t, root: root, log: &bytes.Buffer{}, done: make(chan struct{})}
	c.cmd = exec.Command("systemd-nspawn", "--quiet", "-D", root, "-b", "--register=no", "--keep-unit",
		"--private-network", "--machine="+machine, "--console=pipe")
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	// Were this test killed, nspawn powers the container off.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	t.Logf("booting it with systemd-nspawn")
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("systemd-nspawn: %v", err)
	}
	go func() { c.cmd.Wait(); close(c.done) }()
	t.Cleanup(c.stop)

	// PID 1 of the container is nspawn's child once it runs systemd.
	deadline := time.Now().Add(2 * time.Minute)
	for c.pid == 0 {
		select {
		case <-c.done:
			t.Fatalf("systemd-nspawn exited: %v\n%s", c.cmd.ProcessState, tail(c.log.Bytes(), 4000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container's systemd never started\n%s", tail(c.log.Bytes(), 4000))
		}
		c.pid = systemdChild(c.cmd.Process.Pid)
		if c.pid == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	// is-system-running --wait returns once the boot finished: "running", or "degraded" when a
	// unit that does not matter here failed (listed in the log). Until systemd's bus is up it
	// fails to connect: try again.
	var out, state string
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		out, _ = c.try(3*time.Minute, "systemctl is-system-running --wait; systemctl --failed --no-legend --plain")
		state = strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
		if !strings.Contains(out, "Failed to connect to bus") || time.Now().After(deadline) {
			break
		}
	}
	if state != "running" && state != "degraded" {
		t.Fatalf("the container did not boot: %s\n%s", out, tail(c.log.Bytes(), 4000))
	}
	t.Logf("booted: %s", strings.ReplaceAll(strings.TrimSpace(out), "\n", "; "))
	return c
}

// systemdChild is the pid of the child of pid (or of its child) that runs systemd, or 0.
func systemdChild(pid int) int {
	for _, child := range children(pid) {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", child)); strings.TrimSpace(string(comm)) == "systemd" {
			return child
		}
		if p := systemdChild(child); p != 0 {
			return p
		}
	}
	return 0
}

func children(pid int) []int {
	var pids []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}

// stop powers the container off (nspawn turns SIGTERM into a clean shutdown) and kills it if it
// has not stopped within a minute.
func (c *container) stop() {
	if c.cmd.Process == nil {
		return
	}
	select {
	case <-c.done:
		return
	default:
	}
	c.t.Logf("powering the container off")
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		c.t.Errorf("the container did not power off in a minute: killing it")
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// try runs a shell script inside the container (nsenter into all its namespaces, as root, with
// a clean environment) and returns its output.
func (c *container) try(timeout time.Duration, script string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(c.pid), "-a", "--",
		"/usr/bin/env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C.UTF-8", "HOME=/root", "/bin/sh", "-c", script)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// sh runs a script inside the container and fails the test if it fails.
func (c *container) sh(script string) string {
	c.t.Helper()
	out, err := c.try(5*time.Minute, script)
	if err != nil {
		c.t.Fatalf("in the container: %s\n%v\n%s", script, err, out)
	}
	return out
}

// textgen runs `caddy textgen ARGS --json` inside the container, as an operator does, and
// decodes its one JSON object.
func (c *container) textgen(args string) map[string]any {
	c.t.Helper()
	// Only stdout: reading --config logs to stderr.
	out := c.sh("caddy textgen " + args + " --json --config /etc/caddy/Caddyfile 2>/tmp/textgen.err || { cat /tmp/textgen.err; exit 1; }")
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		c.t.Fatalf("caddy textgen %s: %v\n%s", args, err, out)
	}
	return v
}

// balance is the account's balance as `caddy textgen balance` prints it.
func (c *container) balance(acct string) float64 {
	c.t.Helper()
	v := c.textgen("balance --account " + acct)
	b, ok := v["balance"].(float64)
	if !ok {
		c.t.Fatalf("caddy textgen balance: %v", v)
	}
	return b
}

// mainPID is caddy.service's main process (0 when it does not run).
func (c *container) mainPID() string {
	c.t.Helper()
	return strings.TrimSpace(c.sh("systemctl show --property=MainPID --value caddy.service"))
}

// active fails the test unless caddy.service is active.
func (c *container) active(when string) {
	c.t.Helper()
	if out, err := c.try(time.Minute, "systemctl is-active caddy.service"); err != nil || strings.TrimSpace(out) != "active" {
		log, _ := c.try(time.Minute, "journalctl --no-pager --lines=40 --unit=caddy.service")
		c.t.Fatalf("%s: caddy.service is %q, not active\n%s", when, strings.TrimSpace(out), log)
	}
}

// generate sends one charged generate request with key inside the container and returns its
// HTTP status.
func (c *container) generate(key string) string {
	c.t.Helper()
	return strings.TrimSpace(c.sh(`curl -sS -o /tmp/generate.out -w '%{http_code}' -H 'Content-Type: application/json' ` +
		`-H 'X-API-Key: ` + key + `' -d '{"tool":"summarizer","input":"Ask for the invoice","language":"en"}' ` +
		`http://127.0.0.1:8080/api/v1/generate; echo; cat /tmp/generate.out | head -c 300`))
}

func secret(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b)
}

// upgradeDeb writes a copy of deb whose version is higher (its version with ".1" added): the
// same files, so that installing it is an upgrade of the package.
func upgradeDeb(t *testing.T, deb, dir string) string {
	t.Helper()
	tree := filepath.Join(dir, "tree")
	run(t, "", "dpkg-deb", "-R", deb, tree)
	control := filepath.Join(tree, "DEBIAN/control")
	raw, err := os.ReadFile(control)
	if err != nil {
		t.Fatal(err)
	}
	var version string
	lines := strings.Split(string(raw), "\n")
	for i, l := range lines {
		if v, ok := strings.CutPrefix(l, "Version: "); ok {
			version = v
			lines[i] = "Version: " + v + ".1"
		}
	}
	if version == "" {
		t.Fatalf("%s has no Version:\n%s", deb, raw)
	}
	if err := os.WriteFile(control, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "", "dpkg", "--compare-versions", version+".1", "gt", version)
	out := filepath.Join(dir, "caddy-textgen_upgrade_amd64.deb")
	run(t, "", "dpkg-deb", "--build", tree, out)
	return out
}

// TestPackageOnSystemd installs the .deb for real: on a Debian bookworm root booted with
// systemd-nspawn (systemd as PID 1, a persistent journal, no /etc/hosts, so `localhost` does
// not resolve, and no network but its loopback), with the pinned Ollama and the tiny model
// running inside as the model server. dpkg -i starts the service; an account, a key and credits
// come from `caddy textgen`; a generate is charged; reload and restart keep the balance; apt-get
// remove, then purge, keep the ledger; a reinstall finds the balance; an upgrade restarts the
// service; a start that fails makes the postinst fail with a message; and the journal holds
// none of the secrets set in /etc/default/caddy-textgen.
func TestPackageOnSystemd(t *testing.T) {
	full(t, "root, debootstrap, systemd-nspawn (systemd-container), the Debian mirror and the pinned Ollama")
	if os.Geteuid() != 0 {
		t.Fatal("systemd-nspawn needs root: run the full tier as root (CI does)")
	}
	for _, tool := range []string{"debootstrap", "systemd-nspawn", "nsenter", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: apt-get install debootstrap systemd-container (.ci/run does)", tool)
		}
	}
	bookwormRoot(t) // first: it needs no build
	// $TEXTGEN_INSTALL_DEB: a .deb built before (dist/caddy-textgen_*_linux_amd64.deb), to rerun
	// this test without the release build's minutes.
	deb := os.Getenv("TEXTGEN_INSTALL_DEB")
	if deb == "" {
		dist := releaseDist(t)
		m, err := filepath.Glob(filepath.Join(dist, "caddy-textgen_*_linux_amd64.deb"))
		if err != nil || len(m) != 1 {
			t.Fatalf("dist/caddy-textgen_*_linux_amd64.deb: %v %v", m, err)
		}
		deb = m[0]
	}
	upgrade := upgradeDeb(t, deb, t.TempDir())

	// The pinned Ollama and the tiny model (the main module's tinyollama builds and caches them).
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the pinned Ollama and the tiny model (go run ./backends/cmd/tinyollama -install-only)")
	ollama := strings.TrimSpace(run(t, repo, "go", "run", "./backends/cmd/tinyollama", "-install-only"))
	ollama = strings.TrimSpace(ollama[strings.LastIndex(ollama, "\n")+1:])
	models, _ := filepath.Glob(filepath.Join(cacheDir(t), "tiny-llama-*.gguf"))
	if len(models) == 0 {
		t.Fatalf("no tiny model in %s", cacheDir(t))
	}
	gguf := models[len(models)-1]

	stripeKey, webhookSecret := secret(t, "sk_test_"), secret(t, "whsec_")
	c := bootContainer(t, func(root string) {
		// A minimal root: no /etc/hosts, so the name localhost does not resolve.
		os.Remove(filepath.Join(root, "etc/hosts"))
		dir := filepath.Join(root, "opt/tiny-ollama")
		if err := os.MkdirAll(filepath.Join(dir, "home"), 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, "", "cp", ollama, filepath.Join(dir, "ollama"))
		run(t, "", "cp", gguf, filepath.Join(dir, "tiny.gguf"))
		run(t, "", "cp", deb, filepath.Join(root, "root/caddy-textgen.deb"))
		run(t, "", "cp", upgrade, filepath.Join(root, "root/caddy-textgen-upgrade.deb"))
		modelfile := "FROM /opt/tiny-ollama/tiny.gguf\nTEMPLATE \"\"\"{{ range .Messages }}{{ .Content }}\n{{ end }}\"\"\"\n" +
			"PARAMETER num_predict 8\nPARAMETER num_thread 1\nPARAMETER num_ctx 8192\n"
		if err := os.WriteFile(filepath.Join(dir, "Modelfile"), []byte(modelfile), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if out, err := c.try(time.Minute, "getent hosts localhost"); err == nil {
		t.Fatalf("localhost resolves in the container (%s): the test would not show that the package needs no /etc/hosts", out)
	}

	t.Logf("starting the tiny Ollama inside on 127.0.0.1:11434")
	c.sh(`systemd-run --quiet --unit=tiny-ollama --setenv=OLLAMA_HOST=127.0.0.1:11434 ` +
		`--setenv=OLLAMA_MODELS=/opt/tiny-ollama/models --setenv=HOME=/opt/tiny-ollama/home /opt/tiny-ollama/ollama serve
for i in $(seq 600); do curl -sf http://127.0.0.1:11434/api/version >/dev/null && break; sleep 0.1; done
OLLAMA_HOST=127.0.0.1:11434 HOME=/opt/tiny-ollama/home /opt/tiny-ollama/ollama create tiny -f /opt/tiny-ollama/Modelfile >/dev/null`)

	t.Logf("dpkg -i %s", filepath.Base(deb))
	c.sh("dpkg -i /root/caddy-textgen.deb")
	c.active("after dpkg -i")

	t.Logf("setting the model and Stripe secrets in /etc/default/caddy-textgen, systemctl restart caddy")
	c.sh(fmt.Sprintf(`cat >>/etc/default/caddy-textgen <<'EOF'
TEXTGEN_MODEL=tiny
TEXTGEN_STRIPE_SECRET_KEY=%s
TEXTGEN_STRIPE_WEBHOOK_SECRET=%s
EOF
systemctl restart caddy`, stripeKey, webhookSecret))
	c.active("after systemctl restart")

	t.Logf("an account, a key and 5 credits through caddy textgen; a charged generate")
	acct, _ := c.textgen("account create --email buyer@example.com")["id"].(string)
	key, _ := c.textgen("key create --account " + acct)["key"].(string)
	if acct == "" || key == "" {
		t.Fatalf("account %q, key %q", acct, key)
	}
	c.textgen("credits grant --account " + acct + " --credits 5 --reference INV-1")
	if got := c.generate(key); !strings.HasPrefix(got, "200") {
		t.Fatalf("generate: %s", got)
	}
	if b := c.balance(acct); b != 4 {
		t.Fatalf("after one generate the balance is %v, want 4", b)
	}

	t.Logf("systemctl reload, then restart: the balance stays")
	pid := c.mainPID()
	c.sh("systemctl reload caddy")
	c.active("after systemctl reload")
	if p := c.mainPID(); p != pid {
		t.Errorf("systemctl reload replaced the process (%s, then %s)", pid, p)
	}
	if b := c.balance(acct); b != 4 {
		t.Fatalf("after reload the balance is %v, want 4", b)
	}
	c.sh("systemctl restart caddy")
	c.active("after systemctl restart")
	if b := c.balance(acct); b != 4 {
		t.Fatalf("after restart the balance is %v, want 4", b)
	}
	if got := c.generate(key); !strings.HasPrefix(got, "200") {
		t.Fatalf("generate after restart: %s", got)
	}
	if b := c.balance(acct); b != 3 {
		t.Fatalf("after a second generate the balance is %v, want 3", b)
	}

	remove := func(how string) {
		t.Helper()
		c.sh("DEBIAN_FRONTEND=noninteractive apt-get " + how + " -y -q caddy-textgen")
		if out, _ := c.try(time.Minute, "systemctl is-active caddy.service"); strings.TrimSpace(out) == "active" {
			t.Fatalf("caddy.service still runs after apt-get %s", how)
		}
	}
	t.Logf("apt-get remove: the ledger and the configuration stay; a reinstall starts the service and finds the balance")
	remove("remove")
	c.sh("test -f /etc/default/caddy-textgen && test -f /etc/caddy/Caddyfile && test -d /var/lib/caddy-textgen/ledger")
	c.sh("dpkg -i /root/caddy-textgen.deb")
	c.active("after apt-get remove and a reinstall")
	if b := c.balance(acct); b != 3 {
		t.Fatalf("after remove and reinstall the balance is %v, want 3", b)
	}

	t.Logf("apt-get remove, then purge: the configuration goes, the ledger stays; a reinstall finds the balance")
	remove("remove")
	remove("purge")
	c.sh("test ! -e /etc/default/caddy-textgen && test ! -e /etc/caddy/Caddyfile && " +
		"test ! -L /etc/systemd/system/multi-user.target.wants/caddy.service && " +
		"test -d /var/lib/caddy-textgen/ledger && getent passwd caddy")
	c.sh("dpkg -i /root/caddy-textgen.deb")
	c.active("after purge and a reinstall")
	if b := c.balance(acct); b != 3 {
		t.Fatalf("after purge and reinstall the balance is %v, want 3", b)
	}

	t.Logf("upgrading to %s: the service restarts", filepath.Base(upgrade))
	pid = c.mainPID()
	c.sh("dpkg -i /root/caddy-textgen-upgrade.deb")
	c.active("after the upgrade")
	if p := c.mainPID(); p == pid {
		t.Errorf("the upgrade did not restart caddy.service (main PID %s before and after)", pid)
	}
	if b := c.balance(acct); b != 3 {
		t.Fatalf("after the upgrade the balance is %v, want 3", b)
	}

	t.Logf("a service that cannot start: the postinst fails and says so")
	c.sh("echo TEXTGEN_LEDGER=/proc/no-ledger-here >>/etc/default/caddy-textgen")
	out, err := c.try(5*time.Minute, "dpkg -i /root/caddy-textgen-upgrade.deb")
	if err == nil {
		t.Errorf("dpkg -i succeeded with a service that cannot start:\n%s", out)
	}
	contains(t, "dpkg -i with a broken configuration", out, "caddy.service failed to start", "dpkg --configure -a")
	c.sh("sed -i '/TEXTGEN_LEDGER=/d' /etc/default/caddy-textgen && dpkg --configure -a")
	c.active("after dpkg --configure -a")

	t.Logf("the journal holds no secret from /etc/default/caddy-textgen")
	c.sh("journalctl --flush")
	journal := c.sh("journalctl --no-pager -o export")
	if !strings.Contains(journal, "serving initial configuration") {
		t.Fatalf("the journal has no log of Caddy's: the check below would prove nothing\n%s", tail([]byte(journal), 2000))
	}
	// And the files on disk, as a member of the adm group reads them.
	raw := c.sh("cat /var/log/journal/*/*.journal* | tr -c '[:print:]' '\\n'")
	for name, s := range map[string]string{"TEXTGEN_STRIPE_SECRET_KEY": stripeKey, "TEXTGEN_STRIPE_WEBHOOK_SECRET": webhookSecret} {
		if strings.Contains(journal, s) {
			t.Errorf("journalctl shows %s's value", name)
		}
		if strings.Contains(raw, s) {
			t.Errorf("the journal's files in /var/log/journal hold %s's value", name)
		}
	}
}
