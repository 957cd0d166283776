#!/bin/sh
# Enables and starts caddy.service on a first install, restarts it on an upgrade if it runs.
# Arguments: deb passes "configure" [old version]; rpm passes 1 (install) or 2 (upgrade).
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
	systemctl try-restart caddy.service >/dev/null || true
else
	systemctl enable caddy.service >/dev/null || true
	systemctl start caddy.service >/dev/null || true
fi
