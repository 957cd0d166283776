#!/bin/sh
# Reloads systemd after removal. The ledger in /var/lib/caddy-textgen and the caddy user (with
# its home /var/lib/caddy) are kept, even on purge: the ledger holds customers' credits and
# payments. A purge (dpkg) removes the configuration files, /etc/caddy/Caddyfile and
# /etc/default/caddy-textgen, and /etc/caddy once empty.
set -e
if [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
