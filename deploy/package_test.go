package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// goreleaserVersion is the goreleaser this repository's releases are built with (deploy/tools).
const goreleaserVersion = "v2.15.1"

// full skips t in the fast tier (-short), as internal/tier does in the main module: the full
// tier runs it and fails, never skips, when a tool is missing.
func full(t *testing.T, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: the full tier (go test without -short) runs it", needs)
	}
}

// cacheDir is the test cache: $TEXTGEN_CACHE, else $XDG_CACHE_HOME/caddy-textgen, else
// ~/.cache/caddy-textgen.
func cacheDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("TEXTGEN_CACHE"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(d, "caddy-textgen")
}

// goreleaser builds the pinned goreleaser once into the cache (deploy/tools pins it) and
// returns its path.
func goreleaser(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(cacheDir(t), "goreleaser-"+goreleaserVersion)
	bin := filepath.Join(dir, "goreleaser")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := fmt.Sprintf("%s.%d", bin, os.Getpid())
	cmd := exec.Command("go", "build", "-o", tmp, "github.com/goreleaser/goreleaser/v2")
	cmd.Dir = "tools"
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		t.Fatalf("building goreleaser %s: %v\n%s", goreleaserVersion, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// release is the one snapshot release of this test run, shared by the tests that need packages.
var release struct {
	once sync.Once
	dist string
	err  error
}

// releaseDist builds a snapshot release as the docs say (`goreleaser release --snapshot --clean`
// at the repository's root), once per test run, and returns its dist directory.
func releaseDist(t *testing.T) string {
	t.Helper()
	bin := goreleaser(t)
	release.once.Do(func() {
		root, err := filepath.Abs("..")
		if err != nil {
			release.err = err
			return
		}
		t.Logf("building the packages: goreleaser release --snapshot --clean (a few minutes)")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "release", "--snapshot", "--clean")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			release.err = fmt.Errorf("goreleaser release --snapshot --clean: %v\n%s", err, out)
			return
		}
		release.dist = filepath.Join(root, "dist")
	})
	if release.err != nil {
		t.Fatal(release.err)
	}
	return release.dist
}

// run runs a command and returns its output, failing the test when it fails.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// contains fails the test for each of wants that text lacks.
func contains(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s: no %q in\n%s", what, w, text)
		}
	}
}

// TestReleasePackages builds a snapshot release exactly as the docs say (`goreleaser release
// --snapshot --clean` at the repository's root: Caddy with the plugin for linux amd64 and
// arm64, as archives, .deb and .rpm) and checks what an operator installs: the packages'
// metadata and files (dpkg-deb, rpm), the maintainer scripts that create the caddy user, the
// configuration files kept on upgrade, the systemd unit (systemd-analyze verify on the unit
// extracted into a root of its own), and that the packaged amd64 binary has the textgen modules.
func TestReleasePackages(t *testing.T) {
	full(t, "goreleaser, dpkg-deb, rpm and systemd-analyze")
	dist := releaseDist(t)
	root := filepath.Dir(dist)
	find := func(pattern string) string {
		t.Helper()
		m, err := filepath.Glob(filepath.Join(dist, pattern))
		if err != nil || len(m) != 1 {
			t.Fatalf("dist/%s: %v %v", pattern, m, err)
		}
		return m[0]
	}
	for _, arch := range []string{"amd64", "arm64"} {
		find("caddy-textgen_*_linux_" + arch + ".tar.gz")
		find("caddy-textgen_*_linux_" + arch + ".deb")
	}
	find("caddy-textgen_*_linux_amd64.rpm")
	find("caddy-textgen_*_linux_arm64.rpm")

	deb := find("caddy-textgen_*_linux_amd64.deb")
	info := run(t, root, "dpkg-deb", "-I", deb)
	contains(t, "dpkg-deb -I", info, "Package: caddy-textgen", "Architecture: amd64", "Conflicts: caddy",
		"Replaces: caddy", "Provides: caddy", "preinst", "postinst", "prerm", "postrm", "conffiles")
	conffiles := run(t, root, "dpkg-deb", "-I", deb, "conffiles")
	contains(t, "conffiles", conffiles, "/etc/caddy/Caddyfile", "/etc/default/caddy-textgen")
	preinst := run(t, root, "dpkg-deb", "-I", deb, "preinst")
	contains(t, "preinst", preinst, "useradd --system", "--home-dir /var/lib/caddy", "groupadd --system caddy")
	listing := run(t, root, "dpkg-deb", "-c", deb)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`-rwxr-xr-x .* \./usr/bin/caddy\n`),
		regexp.MustCompile(`-rw-r--r-- .* \./usr/lib/systemd/system/caddy\.service\n`),
		regexp.MustCompile(`-rw-r--r-- .* \./etc/caddy/Caddyfile\n`),
		regexp.MustCompile(`-rw------- .* \./etc/default/caddy-textgen\n`), // it holds secrets
		regexp.MustCompile(`\./usr/share/man/man8/caddy\.8\n`),
		regexp.MustCompile(`\./usr/share/man/man8/caddy-textgen\.8\n`),
		regexp.MustCompile(`\./usr/share/doc/caddy-textgen/DEPLOYING\.md\n`),
	} {
		if !want.MatchString(listing) {
			t.Errorf("dpkg-deb -c: nothing matches %s in\n%s", want, listing)
		}
	}

	rpm := find("caddy-textgen_*_linux_amd64.rpm")
	rinfo := run(t, root, "rpm", "-qip", rpm)
	contains(t, "rpm -qip", rinfo, "Name        : caddy-textgen", "Architecture: x86_64", "License     : Apache-2.0")
	contains(t, "rpm -qp --conflicts", run(t, root, "rpm", "-qp", "--conflicts", rpm), "caddy")
	contains(t, "rpm -qp --scripts", run(t, root, "rpm", "-qp", "--scripts", rpm), "useradd --system", "systemctl")
	contains(t, "rpm -qp --configfiles", run(t, root, "rpm", "-qp", "--configfiles", rpm), "/etc/caddy/Caddyfile", "/etc/default/caddy-textgen")
	contains(t, "rpm -qlp", run(t, root, "rpm", "-qlp", rpm), "/usr/bin/caddy", "/usr/lib/systemd/system/caddy.service")
	if arm := run(t, root, "rpm", "-qip", find("caddy-textgen_*_linux_arm64.rpm")); !strings.Contains(arm, "Architecture: aarch64") {
		t.Errorf("arm64 rpm:\n%s", arm)
	}

	// The unit, in a root of its own with the package's files: its binary exists there.
	sysroot := t.TempDir()
	run(t, root, "dpkg-deb", "-x", deb, sysroot)
	unit := filepath.Join(sysroot, "usr/lib/systemd/system/caddy.service")
	// The targets it names (network-online.target, multi-user.target) come from this machine's
	// systemd, not overwriting the package's files.
	hostUnits := "/usr/lib/systemd/system"
	if _, err := os.Stat(filepath.Join(hostUnits, "sysinit.target")); err != nil {
		hostUnits = "/lib/systemd/system"
	}
	run(t, root, "cp", "-an", hostUnits+"/.", filepath.Join(sysroot, "usr/lib/systemd/system"))
	if out := run(t, root, "systemd-analyze", "verify", "--root="+sysroot, unit); strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify: %s", out)
	}
	raw, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "caddy.service", string(raw), "User=caddy", "ExecStart=/usr/bin/caddy run --config /etc/caddy/Caddyfile\n",
		"ExecReload=/usr/bin/caddy reload --config /etc/caddy/Caddyfile", "AmbientCapabilities=CAP_NET_BIND_SERVICE",
		"StateDirectory=caddy-textgen", "EnvironmentFile=-/etc/default/caddy-textgen", "Type=notify")
	// Hardening that would break the ledger (a read-only state directory, no fsync) is absent.
	for _, bad := range []string{"ProtectSystem=strict", "SystemCallFilter", "ReadOnlyPaths=/var/lib"} {
		if strings.Contains(string(raw), bad) {
			t.Errorf("caddy.service has %s", bad)
		}
	}
	for _, s := range []string{"preinstall.sh", "postinstall.sh", "preremove.sh", "postremove.sh"} {
		run(t, root, "sh", "-n", filepath.Join("deploy/packaging/scripts", s))
	}

	// The packaged binary is Caddy with the plugin.
	caddy := filepath.Join(sysroot, "usr/bin/caddy")
	mods := run(t, root, caddy, "list-modules")
	contains(t, "caddy list-modules", mods, "http.handlers.textgen\n", "http.handlers.textgen_account\n", "admin.api.textgen\n")
	contains(t, "caddy help textgen", run(t, root, caddy, "help", "textgen"), "textgen")
	// The packaged Caddyfile is valid for that binary.
	out := run(t, root, caddy, "adapt", "--config", filepath.Join(sysroot, "etc/caddy/Caddyfile"))
	contains(t, "caddy adapt /etc/caddy/Caddyfile", out, `"handler":"textgen"`)
}
