#!/bin/sh
# Creates the caddy user and group before the files are installed, as Caddy's own packages do.
set -e
if ! getent group caddy >/dev/null; then
	groupadd --system caddy
fi
if ! getent passwd caddy >/dev/null; then
	useradd --system \
		--gid caddy \
		--create-home \
		--home-dir /var/lib/caddy \
		--shell /usr/sbin/nologin \
		--comment "Caddy web server" \
		caddy
fi
