#!/bin/sh
# Enables and starts caddy.service on a first install, restarts it on an upgrade if it is enabled.
# Arguments: deb passes "configure" [old version]; rpm passes 1 (install) or 2 (upgrade).
#
# A start or restart that fails is reported, with the service's last log lines, and fails this
# script: dpkg then says the package is not configured (rather than reporting an install whose
# service is down), and `dpkg --configure -a` finishes it once the cause is fixed. rpm only
# warns about a failed scriptlet; the message says what to run.
set -e
chmod 0600 /etc/default/caddy-textgen
chown root:root /etc/default/caddy-textgen
# The ledger's parent: systemd's StateDirectory= creates it on start; made here too so that
# `caddy run` by hand as the caddy user finds it.
install -d -m 0700 -o caddy -g caddy /var/lib/caddy-textgen

[ -d /run/systemd/system ] || exit 0
systemctl --system daemon-reload >/dev/null || true
upgrade=""
case "$1" in
configure) [ -n "$2" ] && upgrade=yes ;;
2) upgrade=yes ;;
esac
if [ -n "$upgrade" ]; then
	# As Debian's own packages do (debhelper): an enabled service is restarted, and started if
	# it was down (also when `dpkg --configure -a` finishes an upgrade whose restart failed).
	systemctl is-enabled --quiet caddy.service || exit 0
	action=restart
else
	systemctl enable caddy.service >/dev/null || true
	action=start
fi
# started runs the start or restart and looks again for a few seconds: Caddy tells systemd it is
# ready even when its configuration then fails to load, and exits a moment later, so the
# systemctl call alone succeeds for a service that is down.
started() {
	systemctl "$action" caddy.service || return 1
	for _ in 1 2 3; do
		sleep 1
		systemctl is-active --quiet caddy.service || return 1
	done
}
if ! started; then
	echo "caddy-textgen: caddy.service failed to start ($action). Its last log lines:" >&2
	journalctl --no-pager --quiet --lines=20 --unit=caddy.service >&2 || true
	echo "caddy-textgen: fix the cause (journalctl -u caddy; /etc/caddy/Caddyfile, /etc/default/caddy-textgen)," >&2
	echo "caddy-textgen: then run 'dpkg --configure -a' (Debian, Ubuntu) or 'systemctl start caddy' (rpm)." >&2
	exit 1
fi
