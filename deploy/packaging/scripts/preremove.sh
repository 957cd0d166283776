#!/bin/sh
# Stops caddy.service before the package is removed (not on an upgrade).
# Arguments: deb passes "remove" or "upgrade"; rpm passes 0 (remove) or 1 (upgrade).
set -e
[ -d /run/systemd/system ] || exit 0
case "$1" in
remove | 0)
	systemctl stop caddy.service >/dev/null || true
	systemctl disable caddy.service >/dev/null || true
	;;
esac
