# The xdcr-agent image, built from this checkout with Debian 12's own packages only:
#   docker build -t xdcr-agent:0.1.0 .
#   docker run --rm xdcr-agent:0.1.0 version
#   docker run --rm -v "$PWD/xdcr.yaml:/etc/xdcr-agent/xdcr.yaml:ro" -v xdcr-state:/var/lib/xdcr-agent xdcr-agent:0.1.0
# packaging/kubernetes/sidecar.yaml runs it next to a Redis. The build stage installs the build
# dependencies from Debian (scripts/install-deps.sh), builds a Release binary and its man page and
# completions, and packs the .deb (scripts/package.sh); the runtime stage installs that .deb with
# apt, so its Depends (libyaml-cpp, libspdlog, libre2, OpenSSL, ...) come from Debian too.

FROM debian:bookworm AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
# The dependencies first, in a layer of their own: it is rebuilt only when the list changes.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
# .git comes along (see .dockerignore) so that `xdcr-agent version` names the revision.
RUN bash scripts/package.sh && cp build-pkg/xdcr-agent_*.deb /tmp/

FROM debian:bookworm-slim
ENV DEBIAN_FRONTEND=noninteractive
COPY --from=build /tmp/xdcr-agent_*.deb /tmp/
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates /tmp/xdcr-agent_*.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/xdcr-agent_*.deb
# Not root: a fixed uid/gid (10001) that Kubernetes' runAsUser/fsGroup can name. The state
# directory is the only place it writes.
RUN groupadd --system --gid 10001 xdcr-agent \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/xdcr-agent --no-create-home \
      --shell /usr/sbin/nologin xdcr-agent \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/xdcr-agent \
 && install -d -m 0755 /etc/xdcr-agent
USER 10001:10001
VOLUME ["/var/lib/xdcr-agent"]
# The admin server, when agent.admin_listen is set to it (/healthz, /readyz, /status, /metrics).
EXPOSE 9464
ENTRYPOINT ["/usr/bin/xdcr-agent"]
CMD ["run", "-c", "/etc/xdcr-agent/xdcr.yaml"]
