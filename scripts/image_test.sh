#!/usr/bin/env bash
# The container image, built and run here as an offline operator would
# (deploy/README.md, "The image test"). Needs root and Debian's
# docker.io, docker-compose and debootstrap (scripts/image_test.sh --install
# installs them); runs nothing on the machine's default docker socket and
# changes no iptables rules:
#  - starts its own dockerd (vfs storage, no iptables, no bridge; its own
#    data root under the cache folder and its own socket), stopped by PID;
#  - makes the debian:12 base with debootstrap --variant=minbase bookworm and
#    `docker import`s it (no image registry is needed; cached as a tarball);
#  - builds the image from the binaries already in BUILD_DIR: their
#    `cmake --install` tree is the build context of the Dockerfile's
#    FCA_BINARIES=install-tree stage, so nothing is compiled again (the
#    runtime stage's libraries come from the Debian mirror, with apt);
#  - creates a key with the image's fca-server --create_api_key in a data
#    folder owned by UID 10001, runs the container on it (host network,
#    loopback ports) with the models mounted read-only, checks /readyz, runs a small audit with the host's fca to SUCCEEDED, compares
#    --version inside and outside, stops it with `docker stop` (exit 0,
#    drained), starts it again on the same data folder and finds the job
#    and its results;
#  - validates deploy/compose.yaml with `docker-compose config` and brings
#    up what it resolves to, with two changes: host networking instead of
#    the published port (this daemon has no bridge) and free loopback ports;
#    creates its key with `docker-compose run`, audits, stops, brings it
#    down;
#  - removes what it made (containers, volumes, the images it built, the
#    daemon), on failure too. Kept in the cache folder: the base tarball and
#    the daemon's data root (the imported base image and BuildKit's cache,
#    which spares the next run the runtime stage's apt-get).
#
#   scripts/image_test.sh [BUILD_DIR]      (default: build)
#   scripts/image_test.sh --install        apt-get install its packages
#
# FCA_IMAGE_TEST_CACHE: the cache folder [/var/cache/fca-image-test];
# rm -rf it to start cold. FCA_DEBIAN_MIRROR: debootstrap's mirror
# [http://deb.debian.org/debian]. Exit 77 when a tool is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
packages=(docker.io docker-compose debootstrap curl)

if [ "${1:-}" = --install ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # No recommends: they would bring needrestart, which restarts services.
  # Installing docker.io does not start a daemon where policy-rc.d forbids it
  # or systemd is not running; this script never uses one that does.
  apt-get install -y -q --no-install-recommends "${packages[@]}"
  exit 0
fi

build=$(cd "${1:-build}" && pwd)
cache=${FCA_IMAGE_TEST_CACHE:-/var/cache/fca-image-test}
mirror=${FCA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
start=$SECONDS

# Debian's client, which matches the daemon (not another docker on PATH).
docker_cli=/usr/bin/docker
for tool in /usr/sbin/dockerd "$docker_cli" docker-compose debootstrap curl; do
  if ! command -v "$tool" >/dev/null; then
    echo "image_test: SKIP: $tool not found (scripts/image_test.sh --install)"
    exit 77
  fi
done
if [ "$(id -u)" != 0 ]; then
  echo "image_test: SKIP: dockerd and debootstrap need root"
  exit 77
fi
for name in fca-server fca-worker fca-local-audit fca-train fca; do
  [ -x "$build/bin/$name" ] || { echo "image_test: FAIL: $build/bin/$name not built" >&2; exit 1; }
done

fail() {
  echo "image_test: FAIL: $*" >&2
  exit 1
}
step() { echo "image_test: [$((SECONDS - start)) s] $*"; }

mkdir -p "$cache"
# One run at a time: the daemon's data root is shared between runs.
exec 9>"$cache/lock"
flock 9

work=$(mktemp -d "${TMPDIR:-/tmp}/fca_image_test.XXXXXX")
chmod 0755 "$work"
export DOCKER_HOST=unix://$work/docker.sock
project=fca-image-test
image=fca-server:latest # what deploy/compose.yaml names
base=fca-image-test/debian:12
server=$project-server
dockerd_pid=

docker() { "$docker_cli" "$@"; }

cleanup() {
  status=$?
  set +e
  if [ -n "$dockerd_pid" ]; then
    if [ "$status" != 0 ]; then
      for c in $(docker ps -aq); do docker logs --tail 30 "$c" 2>&1 | sed "s/^/[$c] /" >&2; done
    fi
    [ -f "$work/compose.yaml" ] &&
      docker-compose -p "$project" -f "$work/compose.yaml" down -v --remove-orphans >/dev/null 2>&1
    containers=$(docker ps -aq)
    [ -n "$containers" ] && docker rm -f $containers >/dev/null
    docker volume prune -f >/dev/null
    docker rmi "$image" >/dev/null 2>&1
    kill -TERM "$dockerd_pid" 2>/dev/null
    for _ in $(seq 300); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$dockerd_pid" 2>/dev/null
    wait "$dockerd_pid" 2>/dev/null
    [ "$status" != 0 ] && tail -20 "$work/dockerd.log" >&2
  fi
  # dockerd leaves its network namespace mounted under its exec root.
  awk -v w="$work/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r | xargs -r umount
  # Owned by UID 10001 or root; the data folder may hold the database.
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# --- The daemon.
/usr/sbin/dockerd --data-root="$cache/docker" --exec-root="$work/exec" \
  --pidfile="$work/dockerd.pid" --host="$DOCKER_HOST" --storage-driver=vfs \
  --iptables=false --ip6tables=false --bridge=none >"$work/dockerd.log" 2>&1 &
dockerd_pid=$!
for _ in $(seq 600); do
  docker version >/dev/null 2>&1 && break
  kill -0 "$dockerd_pid" 2>/dev/null || fail "dockerd exited: $(tail -5 "$work/dockerd.log")"
  sleep 0.1
done
docker version >/dev/null || fail "dockerd did not answer on $DOCKER_HOST"
step "dockerd $(docker version -f '{{.Server.Version}}') on $DOCKER_HOST"

# --- The base image.
if ! docker image inspect "$base" >/dev/null 2>&1; then
  tarball=$cache/debian-12-minbase.tar
  if [ ! -f "$tarball" ]; then
    step "debootstrap --variant=minbase bookworm (cold cache: minutes)"
    debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
      { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap"; }
    # The suites of the official debian:12 image.
    cat >"$work/rootfs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
    tar -C "$work/rootfs" -c --exclude='./var/cache/apt/archives/*.deb' \
      --exclude='./var/lib/apt/lists/*' . >"$tarball.tmp"
    mv "$tarball.tmp" "$tarball"
    rm -rf "$work/rootfs"
  fi
  docker import "$tarball" "$base" >/dev/null
fi
step "base image $base"

# --- The image, from this build's install tree.
cmake --install "$build" --prefix "$work/tree" --strip >/dev/null
DOCKER_BUILDKIT=1 docker build --network=host --progress=plain -f "$repo/Dockerfile" \
  --build-arg BASE_IMAGE="$base" --build-arg FCA_BINARIES=install-tree \
  -t "$image" "$work/tree" >"$work/build.log" 2>&1 ||
  { tail -30 "$work/build.log" >&2; fail "docker build"; }
size=$(docker image inspect -f '{{.Size}}' "$image")
step "built $image: $((size / 1000000)) MB"

# --- The models and texts (the host's tools), and the data folder.
init_model() {
  "$build/bin/fca-local-audit" init --out="$work/models/$1" --d_model=32 --n_layers=2 \
    --n_heads=2 --n_groups=4 --d_ff=64 --controller_width=16 --max_seq_len=64 "${@:2}" \
    >>"$work/init.log" 2>&1 || { cat "$work/init.log" >&2; fail "fca-local-audit init $1"; }
}
init_model tiny --seed=1 --controller_out_std=1.0
init_model tiny-dense --family=dense --seed=1
chmod -R a+rX "$work/models"
"$build/bin/fca-train" split --out="$work/texts" >"$work/split.log" 2>&1 ||
  { cat "$work/split.log" >&2; fail "fca-train split"; }
mkdir -m 0700 "$work/data"
chown 10001:10001 "$work/data"

fca() { "$build/bin/fca" "$@"; }
# Uploads the texts, audits them to the end; prints the job's id.
audit() {
  fca datasets upload --name=eval "$work/texts/eval.txt" >/dev/null
  fca datasets upload --name=calib "$work/texts/calib.txt" >/dev/null
  local job
  job=$(fca audit --models=tiny --dense_twin=tiny-dense --eval=eval --calib=calib --window=16 \
    --batch=4 --max_eval_windows=32 --max_calib_windows=32 --bootstrap=200 \
    --timing_repeats=2 --detach)
  fca watch "$job" >"$work/watch.log" 2>&1 || { cat "$work/watch.log" >&2; fail "fca watch $job"; }
  job_succeeded "$job"
  echo "$job"
}
job_succeeded() {
  local shown
  shown=$(fca jobs show "$1") || fail "fca jobs show $1"
  grep -q SUCCEEDED <<<"$shown" || fail "job $1 is not SUCCEEDED:"$'\n'"$shown"
}
result_rows() { fca results --job="$1" --format=csv | tail -n +2 | wc -l; }
# Waits for the "listening on" lines (gRPC, HTTP) in container $1's log, $2
# of them in all [2] (the log keeps those of earlier starts).
wait_listening() {
  for _ in $(seq 600); do
    [ "$(docker logs "$1" 2>/dev/null | grep -c 'listening on')" -ge "${2:-2}" ] && return 0
    [ "$(docker inspect -f '{{.State.Running}}' "$1")" = true ] ||
      fail "container $1 exited: $(docker logs --tail 20 "$1" 2>&1)"
    sleep 0.1
  done
  fail "container $1 is not listening: $(docker logs --tail 20 "$1" 2>&1)"
}

# Prints the admin key that the image's fca-server --create_api_key, run by
# "$@" (docker run --rm ... or compose run --rm ...), printed.
create_key() {
  local key
  key=$("$@" --create_api_key=image-test --role=admin | tr -d '\r') || fail "$* --create_api_key"
  [ -n "$key" ] || fail "--create_api_key printed no key"
  echo "$key"
}

# --- docker run: the first key, the server (its flags after the image's
# ENTRYPOINT flags win), an audit.
port=$(free_port)
http_port=$(free_port)
export FCA_SERVER=127.0.0.1:$port FCA_TOKEN
FCA_TOKEN=$(create_key docker run --rm -v "$work/data:/var/lib/fca" "$image")
[ "$(stat -c %u "$work/data/fca.sqlite")" = 10001 ] || fail "the database is not owned by 10001"
docker run -d --name "$server" --network=host \
  -v "$work/models:/models:ro" -v "$work/data:/var/lib/fca" "$image" \
  --listen="$FCA_SERVER" --http_listen="127.0.0.1:$http_port" --threads=1 >/dev/null
wait_listening "$server"
ready=$(curl -sS --max-time 10 "http://127.0.0.1:$http_port/readyz") || fail "/readyz"
step "container $server: /readyz: $ready"

version=$("$build/bin/fca-server" --version)
for name in fca-server fca; do
  inside=$(docker exec "$server" "$name" --version) || fail "$name --version in the container"
  [ "$inside" = "$("$build/bin/$name" --version)" ] ||
    fail "$name --version in the container: '$inside', on the host: '$("$build/bin/$name" --version)'"
done
step "--version inside: $version"

job=$(audit)
rows=$(result_rows "$job")
[ "$rows" -gt 0 ] || fail "job $job has no results"
step "job $job SUCCEEDED with $rows results"

# docker stop sends SIGTERM: the server drains and exits 0.
docker stop -t 60 "$server" >/dev/null
[ "$(docker inspect -f '{{.State.ExitCode}}' "$server")" = 0 ] ||
  fail "exit code $(docker inspect -f '{{.State.ExitCode}}' "$server") after docker stop"
docker logs "$server" 2>&1 | grep -q 'fca-server: stopped' || fail "the server did not drain"
step "docker stop: exit 0, drained"

# Started again on the same data folder, it finds the job and its results.
docker start "$server" >/dev/null
wait_listening "$server" 4
job_succeeded "$job"
[ "$(result_rows "$job")" = "$rows" ] || fail "job $job has $(result_rows "$job") results, not $rows"
docker stop -t 60 "$server" >/dev/null
docker rm "$server" >/dev/null
step "restarted on the same data: job $job and its $rows results are there"

# --- Compose: what `docker-compose config` resolves deploy/compose.yaml to,
# with host networking instead of the published port (this daemon has no
# bridge; compose refuses ports with network_mode: host, and an override file
# cannot remove them) and free loopback ports.
port=$(free_port)
http_port=$(free_port)
export FCA_SERVER=127.0.0.1:$port FCA_MODELS=$work/models FCA_TOKEN=
docker-compose -p "$project" -f "$repo/deploy/compose.yaml" config >"$work/compose.resolved.yaml" ||
  fail "docker-compose config: deploy/compose.yaml"
python3 - "$work/compose.resolved.yaml" "$work/compose.yaml" "$FCA_SERVER" "$http_port" <<'EOF'
import sys, yaml
resolved, out, listen, http_port = sys.argv[1:]
compose = yaml.safe_load(open(resolved))
service = compose["services"]["fca-server"]
del service["ports"]
service.pop("networks", None)
service["network_mode"] = "host"
service["command"] = service.get("command", []) + [
    f"--listen={listen}", f"--http_listen=127.0.0.1:{http_port}", "--threads=1"]
compose.pop("networks", None)
yaml.safe_dump(compose, open(out, "w"))
EOF
compose() { docker-compose -p "$project" -f "$work/compose.yaml" "$@"; }
FCA_TOKEN=$(create_key compose run --rm -T fca-server)
compose up -d --no-build >"$work/compose.log" 2>&1 || { cat "$work/compose.log" >&2; fail "compose up"; }
container=$(compose ps -q fca-server)
wait_listening "$container"
job=$(audit)
step "compose: job $job SUCCEEDED"
compose stop >/dev/null 2>&1
[ "$(docker inspect -f '{{.State.ExitCode}}' "$container")" = 0 ] ||
  fail "compose stop: the server did not exit 0"
compose down -v >/dev/null 2>&1

step "image_test: OK (image $((size / 1000000)) MB)"
