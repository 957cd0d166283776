#!/bin/sh
# Stops caddy.service before the package is removed (not on an upgrade).
# Arguments: deb passes "remove" or "upgrade"; rpm passes 0 (remove) or 1 (upgrade).
# deb keeps the service enabled until the purge (postremove), as Debian's own packages do, so
# that reinstalling a removed package starts it again; rpm has no purge and disables it here.
set -e
[ -d /run/systemd/system ] || exit 0
case "$1" in
remove)
	systemctl stop caddy.service >/dev/null || true
	;;
0)
	systemctl stop caddy.service >/dev/null || true
	systemctl disable caddy.service >/dev/null || true
	;;
esac
