# scopeproxy sidecar image.
#   docker build -t scopeproxy .
#   docker run --rm -p 127.0.0.1:8080:8080 scopeproxy run --listen 0.0.0.0:8080
# Build stage: the official Swift image for Debian 12; the Swift runtime is linked statically, so the
# runtime stage needs only the C libraries the binary links (see `make image-check`).
FROM swift:6.3-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends libevent-dev libssl-dev libyaml-dev libnghttp2-dev pkgconf \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Package.swift ./
COPY Sources ./Sources
COPY Tests ./Tests
RUN swift build -c release --static-swift-stdlib --product scopeproxy \
 && install -m 0755 -s .build/release/scopeproxy /usr/local/bin/scopeproxy

# Runtime stage: slim Debian 12 with exactly the libraries `ldd` reports, and a non-root user.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libevent-2.1-7 libevent-core-2.1-7 libevent-openssl-2.1-7 libevent-pthreads-2.1-7 libssl3 libyaml-0-2 libnghttp2-14 libstdc++6 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/scopeproxy --create-home scopeproxy
COPY --from=build /usr/local/bin/scopeproxy /usr/local/bin/scopeproxy
COPY config/sidecar.yaml /etc/scopeproxy/config.yaml
USER 10001:10001
ENV SCOPEPROXY_CONFIG=/etc/scopeproxy/config.yaml
EXPOSE 8080 9090
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --retries=3 CMD ["/usr/local/bin/scopeproxy", "health"]
ENTRYPOINT ["/usr/local/bin/scopeproxy"]
CMD ["run"]
