# Caddy with the caddy-textgen plugin, built the way Caddy's image documents it: xcaddy in the
# builder image, the binary copied into the official image. From the repository root:
#
#   docker build -t caddy-textgen .
#
# The Caddy version is the one go.mod requires. docs/DEPLOYING.md has the details, and
# deploy/compose the scaled deployment.
ARG CADDY_VERSION=2.11.9

FROM caddy:${CADDY_VERSION}-builder AS builder
# go.mod asks for a newer Go than the builder image may have: let the go command fetch it.
ENV GOTOOLCHAIN=auto
WORKDIR /src
COPY . .
RUN xcaddy build v${CADDY_VERSION} --output /usr/bin/caddy --with github.com/caddy-textgen/textgen=/src

FROM caddy:${CADDY_VERSION}
COPY --from=builder /usr/bin/caddy /usr/bin/caddy
# The package's Caddyfile; its ledger goes on the image's /data volume. Mount your own
# Caddyfile over /etc/caddy/Caddyfile, or set the variables it reads (TEXTGEN_SITE, ...).
COPY deploy/packaging/Caddyfile /etc/caddy/Caddyfile
ENV TEXTGEN_LEDGER=/data/textgen/ledger \
	TEXTGEN_SITE=:80 \
	TEXTGEN_BIND=0.0.0.0
