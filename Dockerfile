# syntax=docker/dockerfile:1
#
# tether agent image for Docker builds: the agent, every plugin under
# plugins/ (shell, ecs, sparkeks) and the health check, on debian:trixie-slim
# with a shell (for shell jobs), tini and curl. `make image` builds the
# image deploy/README.md documents without a container engine (static
# binaries on an empty base, no shell); this file is the alternative for
# those who build with Docker and want shell jobs in the agent's container.
#
#   docker build -t tether:dev --build-arg VERSION=$(git describe --always) .
#
# The entrypoint runs the agent directly under tini (exec form, no shell in
# between), so the SIGTERM that ECS sends on a rollout reaches `tether run`,
# which drains: see docs/operations.md, "Rolling deploys".

FROM golang:1.26 AS build
WORKDIR /src
# Module downloads are cached in their own layer. The modules of their own
# under pkg/ (the SDK, the client, the wire types) are required from the
# checkout (go.mod's replace), so their go.mod files come first too.
COPY go.mod go.sum ./
COPY pkg/api/go.mod pkg/api/
COPY pkg/client/go.mod pkg/client/go.sum pkg/client/
COPY pkg/plugin/go.mod pkg/plugin/go.sum pkg/plugin/
RUN go mod download
COPY . .
ARG VERSION=dev
# Static binaries: the final stage needs no Go toolchain or matching libc.
ENV CGO_ENABLED=0
RUN set -eu; \
    mkdir -p /out; \
    go build -trimpath \
        -ldflags "-s -w -X github.com/tetherjobs/tether/internal/agent.buildVersion=${VERSION}" \
        -o /out/tether ./cmd/agent; \
    go build -trimpath -ldflags "-s -w" -o /out/tether-healthcheck ./cmd/tether-healthcheck; \
    for dir in plugins/*/; do \
        name="$(basename "$dir")"; \
        echo "building tether-plugin-$name"; \
        go build -trimpath -ldflags "-s -w" -o "/out/tether-plugin-$name" "./$dir"; \
    done

FROM debian:trixie-slim
# tini: PID 1 that forwards signals and reaps orphans (plugin processes and
# their children re-parented to PID 1). curl: the ECS container health check.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl tini \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 tether \
    && useradd --system --uid 10001 --gid tether --home-dir /var/lib/tether --create-home --shell /usr/sbin/nologin tether
# Plugins sit next to the agent: plugin_dir defaults to the directory of the
# tether executable.
COPY --from=build /out/ /usr/local/bin/
# An example configuration (commands and plugin settings live in the file;
# everything scalar can be overridden with TETHER_* variables). Replace it in
# a derived image or mount your own at this path.
COPY deploy/tether.yaml /etc/tether/tether.yaml
ENV TETHER_CONFIG=/etc/tether/tether.yaml
USER 10001:10001
WORKDIR /var/lib/tether
EXPOSE 9090
# -s: stay a child subreaper when ECS's own init (initProcessEnabled) is PID 1,
# so orphans are reaped here either way. tini forwards SIGTERM to tether only;
# the agent decides when its plugins stop. The subcommand is CMD, so a task
# can run `tether migrate` with the same image and task definition (an ECS
# command override, deploy/README.md, Migrations).
ENTRYPOINT ["/usr/bin/tini", "-s", "--", "/usr/local/bin/tether"]
CMD ["run"]
