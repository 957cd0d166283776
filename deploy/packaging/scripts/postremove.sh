#!/bin/sh
# Reloads systemd after removal; a purge (deb) also drops the service's enablement, as
# `systemctl disable` would (the unit file is gone by now). The ledger in /var/lib/caddy-textgen
# and the caddy user (with its home /var/lib/caddy) are kept, even on purge: the ledger holds
# customers' credits and payments. A purge removes the configuration files,
# /etc/caddy/Caddyfile and /etc/default/caddy-textgen, and /etc/caddy once empty.
set -e
if [ "$1" = purge ]; then
	rm -f /etc/systemd/system/multi-user.target.wants/caddy.service
fi
if [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
