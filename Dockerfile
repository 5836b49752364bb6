# fca-server (with fca-worker, fca-local-audit, fca-train and the fca CLI)
# on Debian 12.
#
#   DOCKER_BUILDKIT=1 docker build -t fca-server .
#   # the first key (stored in the database on the fca-db volume; printed once):
#   docker run --rm -v fca-db:/var/lib/fca fca-server --create_api_key=alice --role=admin
#   docker run -d --name fca -p 127.0.0.1:7400:7400 \
#     -v fca-db:/var/lib/fca -v "$PWD/models":/models:ro fca-server
#   FCA_TOKEN=<the printed key> fca models
#
# BuildKit is required (the build stage's RUN --mount=type=cache): Docker
# 23 and later use it by default, Debian 12's docker.io (20.10) only with
# DOCKER_BUILDKIT=1; its legacy builder refuses --mount. There is
# deliberately no `# syntax=` line: it would make BuildKit fetch the
# Dockerfile frontend from Docker Hub, which fails offline; the frontend
# built into Docker 20.10 and later reads this file as it is.
#
# Build arguments:
#   BASE_IMAGE    the Debian 12 image both stages start from [debian:12].
#                 Offline, make it with debootstrap (scripts/image_test.sh):
#                   debootstrap --variant=minbase bookworm ROOT
#                   tar -C ROOT -c . | docker import - debian:12
#                 The runtime stage still installs its libraries with apt,
#                 so the build needs a Debian mirror (docker build
#                 --network=host where the daemon has no bridge).
#   FCA_BINARIES  where the installed binaries come from [build]:
#                 build         compile the sources here (the build stage);
#                 install-tree  take an install tree made outside, the build
#                               context being the folder that
#                               `cmake --install build --prefix DIR --strip`
#                               filled (binaries built on a Debian 12 host
#                               with scripts/build.sh):
#                   DOCKER_BUILDKIT=1 docker build -f Dockerfile \
#                     --build-arg FCA_BINARIES=install-tree -t fca-server DIR
#                 BuildKit builds only the stages the image needs, so the
#                 second form compiles nothing.
#
# The server requires an API key on every call (--auth is in the ENTRYPOINT);
# only an explicit --auth=false turns that off. Arguments after the image
# name are appended to the ENTRYPOINT flags (--api_keys=FILE, --threads=N,
# --tls_cert/--tls_key, ...). More keys: the same --create_api_key command,
# or `docker exec fca fca-server --db=/var/lib/fca/fca.sqlite
# --create_api_key=bob` while it runs (valid at once). A key file instead
# (--api_keys=/etc/fca/api_keys, mounted read-only) must be owned by UID
# 10001 and mode 0600: the server refuses one that group or others may read.
#
# Only the CPU build of libtorch is packaged in Debian 12, so --device=cuda:N
# does not work in this image.

ARG BASE_IMAGE=debian:12
ARG FCA_BINARIES=build

# ---------------------------------------------------------------------------
# Build stage: the same scripts a developer runs, only the installed binaries
# (no tests, benchmarks or fuzz replays), installed by their install() rules
# (cmake/packaging.cmake: components fca-server and fca-client; the systemd
# files of the Debian package are left out of a plain install).
FROM ${BASE_IMAGE} AS build

ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src

# Packages first, from setup.sh alone, so this layer survives source edits.
COPY scripts/setup.sh scripts/setup.sh
RUN scripts/setup.sh && rm -rf /var/lib/apt/lists/*

COPY . .

# A translation unit including torch takes ~1.4 GB of memory to compile;
# raise with --build-arg FCA_BUILD_JOBS=N on a machine that has it.
ARG FCA_BUILD_JOBS=2
RUN --mount=type=cache,target=/root/.cache/ccache \
    FCA_BUILD_JOBS="${FCA_BUILD_JOBS}" \
      scripts/build.sh -DFCA_BUILD_TESTS=OFF -DFCA_BUILD_BENCH=OFF \
        fca-server fca-worker fca-local-audit fca-train fca \
 && cmake --install build --prefix /out/usr/local --strip

# ---------------------------------------------------------------------------
# The alternative to the build stage (FCA_BINARIES=install-tree): the build
# context is an install prefix (bin/, share/fca/proto/).
FROM scratch AS install-tree
COPY . /out/usr/local/

# The stage FCA_BINARIES names; only its /out/usr/local is used below.
FROM ${FCA_BINARIES} AS binaries

# ---------------------------------------------------------------------------
# Runtime stage: only the shared libraries the binaries link against
# (readelf NEEDED -> dpkg -S; the fca-server .deb's Depends, from
# dpkg-shlibdeps, list the same). libtorch1.13 pulls in its own dependencies.
FROM ${BASE_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive

# libopenblas0-openmp must provide libblas.so.3/liblapack.so.3: the pthread
# build (libopenblas0-pthread) ignores torch::set_num_threads. Listing it
# explicitly satisfies libtorch1.13's "libblas3 | libblas.so.3" dependency;
# the last two commands fail the build if another BLAS won the alternative.
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends \
      libtorch1.13 \
      libopenblas0-openmp \
      libgrpc++1.51 \
      libgrpc29 \
      libprotobuf32 \
      libabsl20220623 \
      libgoogle-glog0v6 \
      libsqlite3-0 \
      libpcre2-8-0 \
      libcpp-httplib0.11 \
      libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && update-alternatives --query "libblas.so.3-$(uname -m)-linux-gnu" \
      | grep -q '^Value: .*/openblas-openmp/' \
 && update-alternatives --query "liblapack.so.3-$(uname -m)-linux-gnu" \
      | grep -q '^Value: .*/openblas-openmp/'

# A fixed numeric UID, so Kubernetes' runAsNonRoot can verify it and host
# bind mounts can be chowned to it (chown 10001:10001 DIR).
RUN groupadd --gid 10001 fca \
 && useradd --uid 10001 --gid fca --no-create-home --no-log-init \
      --home-dir /var/lib/fca --shell /usr/sbin/nologin fca \
 && mkdir -p /var/lib/fca /models \
 && chown fca:fca /var/lib/fca \
 && chmod 0750 /var/lib/fca

# /usr/local/bin: fca-server, fca-worker, fca-local-audit, fca-train, fca;
# /usr/local/share/fca/proto: the API's .proto files.
COPY --from=binaries /out/usr/local/ /usr/local/

# Fail the build, not the first start, if a shared library is missing.
RUN ! ldd /usr/local/bin/fca* | grep 'not found'

# /var/lib/fca: the SQLite database (fca.sqlite plus its -wal/-shm files);
# a new named volume inherits the fca ownership set above.
# /models: the model repository, one folder per model; mount it read-only.
VOLUME ["/var/lib/fca", "/models"]

EXPOSE 7400 7401

USER 10001:10001
WORKDIR /var/lib/fca

# fca-server drains on SIGTERM (a running job is interrupted within one batch
# and queued again; it exits 0). It blocks SIGTERM and waits for it with
# sigwait, which works as PID 1, so no init process is needed. Give it time:
# docker stop -t 60, compose stop_grace_period, Kubernetes
# terminationGracePeriodSeconds.
STOPSIGNAL SIGTERM

# Inside a container the server must listen on 0.0.0.0 (its default,
# 127.0.0.1, is unreachable through a published port); so must the HTTP
# gateway (JSON API, /metrics, /healthz, /readyz: port 7401). That makes it
# reachable by anyone who can reach the port, so authentication is on by
# default (API keys from the database and/or --api_keys=FILE); pass
# --tls_cert/--tls_key too unless a TLS-terminating proxy sits in front.
# The server creates its files with umask 077 (the database is 0600).
ENTRYPOINT ["fca-server", "--models=/models", "--db=/var/lib/fca/fca.sqlite", "--listen=0.0.0.0:7400", "--http_listen=0.0.0.0:7401", "--auth"]
CMD []
