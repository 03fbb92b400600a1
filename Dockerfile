# The `weir` binary in a small runtime image.
#
#   docker build -t weir:local .
#   docker run --rm weir:local list
#
# Stage 1 builds the same `weir` bin target the tests run (same sources, same
# Cargo.lock, the toolchain this repository is tested with), in the release
# profile. RocksDB and librdkafka compile from
# source here (about 10 minutes on 2 cores); the cache mounts keep them
# between builds.
FROM rust:1.95-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake libclang-dev libcurl4-openssl-dev libssl-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY topologies topologies
COPY benches benches
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --locked --release --bin weir \
 && install -m 0755 target/release/weir /usr/local/bin/weir

# Stage 2: only what the binary links dynamically (OpenSSL, zlib, libstdc++).
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 zlib1g libstdc++6 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home-dir /var/lib/weir --create-home weir
COPY --from=build /usr/local/bin/weir /usr/local/bin/weir
USER weir
# Inside a container the HTTP server must listen on all interfaces to be scraped.
ENV WEIR_HTTP_BIND=0.0.0.0:9190 \
    WEIR_STATE_DIR=/var/lib/weir/state
EXPOSE 9190
ENTRYPOINT ["weir"]
CMD ["list"]
