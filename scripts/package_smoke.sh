#!/usr/bin/env bash
# Smoke test of the Debian packages (cmake/packaging.cmake; ctest:
# package_smoke_test). Builds fca-server_*.deb and fca-client_*.deb with
# cpack from an already built tree, checks their control data (the client
# must not depend on libtorch or SQLite), extracts both with dpkg-deb -x into
# a scratch root (nothing is installed on this system), then runs what was
# extracted: --version of every binary, a tiny model written by the
# installed fca-local-audit, texts split by the installed fca-train, and the
# installed fca-server, started with the installed flag file, driven by the
# installed fca through one audit to its report.
#
#   scripts/package_smoke.sh [BUILD_DIR]      (default: build)
#
# CPACK: the cpack to run [cpack]. Exit 77 (ctest SKIP_RETURN_CODE) when a
# tool the packages need is missing: dpkg-deb, dpkg-shlibdeps (dpkg-dev), or
# file (CPack runs it to find the binaries for dpkg-shlibdeps).
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
cpack=${CPACK:-cpack}
start=$SECONDS

for tool in dpkg-deb dpkg-shlibdeps file; do
  if ! command -v "$tool" >/dev/null; then
    echo "package_smoke: SKIP: $tool not found (apt install dpkg-dev file)"
    exit 77
  fi
done

fail() {
  echo "package_smoke: FAIL: $*" >&2
  exit 1
}

work=$(mktemp -d "${TMPDIR:-/tmp}/fca_package_smoke.XXXXXX")
server_pid=
# On any exit: stop the server (it drains on SIGTERM), then drop the scratch
# folder.
cleanup() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# --- Build the packages, outside the build tree's own package folder.
"$cpack" -G DEB --config "$build/CPackConfig.cmake" -B "$work/packages" >"$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log" >&2; fail "cpack failed"; }
server_deb=$(ls "$work"/packages/fca-server_*.deb)
client_deb=$(ls "$work"/packages/fca-client_*.deb)
ls -l "$server_deb" "$client_deb"

# --- Control data.
client_depends=$(dpkg-deb -f "$client_deb" Depends)
server_depends=$(dpkg-deb -f "$server_deb" Depends)
echo "fca-client Depends: $client_depends"
echo "fca-server Depends: $server_depends"
if grep -Eiq 'torch|sqlite' <<<"$client_depends"; then
  fail "fca-client depends on libtorch or SQLite"
fi
grep -q 'libtorch' <<<"$server_depends" || fail "fca-server does not depend on libtorch"
grep -q 'libsqlite3' <<<"$server_depends" || fail "fca-server does not depend on libsqlite3"
dpkg-deb -e "$server_deb" "$work/control"
grep -qx '/etc/fca/fca-server.flags' "$work/control/conffiles" || fail "the flag file is no conffile"
for script in postinst prerm postrm; do
  sh -n "$work/control/$script" || fail "$script does not parse"
done

# Exactly these files, so that nothing else (a test, a benchmark) is shipped.
files_of() { dpkg-deb -c "$1" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $6 }' | sort; }
expected_server=$(printf '%s\n' /usr/bin/fca-server /usr/bin/fca-worker /usr/bin/fca-local-audit \
  /usr/bin/fca-train /usr/lib/systemd/system/fca-server.service \
  /usr/lib/sysusers.d/fca-server.conf /usr/lib/tmpfiles.d/fca-server.conf \
  /etc/fca/fca-server.flags | sort)
expected_client=$( (
  echo /usr/bin/fca
  for proto in proto/fca/v1/*.proto; do echo "/usr/share/fca/$proto"; done
) | sort)
[ "$(files_of "$server_deb")" = "$expected_server" ] ||
  fail "fca-server files differ:"$'\n'"$(diff <(echo "$expected_server") <(files_of "$server_deb"))"
[ "$(files_of "$client_deb")" = "$expected_client" ] ||
  fail "fca-client files differ:"$'\n'"$(diff <(echo "$expected_client") <(files_of "$client_deb"))"

# --- Extract into a scratch root and use only what is there.
root=$work/root
dpkg-deb -x "$server_deb" "$root"
dpkg-deb -x "$client_deb" "$root"
bin=$root/usr/bin
unit_bin=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$root/usr/lib/systemd/system/fca-server.service")
[ -x "$root$unit_bin" ] || fail "the unit's ExecStart $unit_bin is not in the package"

# What postinst does with the sysusers.d and tmpfiles.d entries, applied to
# the scratch root (--root: its own /etc/passwd). Needs root to chown.
if [ "$(id -u)" = 0 ] && command -v systemd-sysusers >/dev/null; then
  systemd-sysusers --root="$root" fca-server.conf
  systemd-tmpfiles --root="$root" --create fca-server.conf
  fca_ids=$(awk -F: '$1 == "fca" { print $3 ":" $4 }' "$root/etc/passwd")
  [ -n "$fca_ids" ] || fail "sysusers.d created no user fca"
  check_mode() {
    [ "$(stat -c '%a %u:%g' "$root$1")" = "$2" ] ||
      fail "$1 is $(stat -c '%a %u:%g' "$root$1"), not $2"
  }
  check_mode /var/lib/fca "700 $fca_ids"
  check_mode /etc/fca "750 0:${fca_ids#*:}"
  check_mode /etc/fca/api_keys "600 0:0"
  check_mode /srv/fca/models "755 0:0"
else
  echo "package_smoke: not root or no systemd-sysusers: sysusers.d/tmpfiles.d not applied"
fi

# Every binary prints "<name> <version>", the same version.
version=$("$bin/fca" --version) || fail "fca --version exited $?"
[[ "$version" =~ ^fca\ [^\ ]+$ ]] || fail "fca --version printed '$version'"
version=${version#fca }
for name in fca-server fca-worker fca-local-audit fca-train; do
  out=$("$bin/$name" --version) || fail "$name --version exited $?"
  [ "$out" = "$name $version" ] || fail "$name --version printed '$out', not '$name $version'"
done
echo "version: $version"

# The installed .proto files compile as installed (protoc is a build tool,
# so this check needs no more than the build did).
if command -v protoc >/dev/null; then
  (cd "$root/usr/share/fca" && protoc -I . --descriptor_set_out=/dev/null proto/fca/v1/*.proto) ||
    fail "the installed .proto files do not compile"
fi

# --- A tiny model and its dense twin, and the evaluation/calibration texts.
init_model() {
  "$bin/fca-local-audit" init --out="$work/models/$1" --d_model=32 --n_layers=2 --n_heads=2 \
    --n_groups=4 --d_ff=64 --controller_width=16 --max_seq_len=64 "${@:2}" \
    >>"$work/init.log" 2>&1 || { cat "$work/init.log" >&2; fail "fca-local-audit init $1"; }
}
init_model tiny --seed=1 --controller_out_std=1.0
init_model tiny-dense --family=dense --seed=1
"$bin/fca-train" split --out="$work/data" >"$work/split.log" 2>&1 ||
  { cat "$work/split.log" >&2; fail "fca-train split"; }

# --- The installed server with the installed flag file; the flags after it
# point it at the scratch folder and at free loopback ports.
"$bin/fca-server" --flagfile="$root/etc/fca/fca-server.flags" --models="$work/models" \
  --db="$work/fca.sqlite" --listen=127.0.0.1:0 --http_listen=127.0.0.1:0 --threads=1 \
  >"$work/server.out" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 300); do
  grep -q "listening on" "$work/server.out" 2>/dev/null && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; fail "fca-server exited"; }
  sleep 0.1
done
address=$(sed -n 's/^fca-server: listening on //p' "$work/server.out")
[ -n "$address" ] || { cat "$work/server.log" >&2; fail "fca-server did not start"; }
export FCA_SERVER=$address
echo "fca-server listening on $address"

fca() { "$bin/fca" "$@"; }
# Outputs are captured before grep -q looks at them: with pipefail, a grep
# that stops reading early would fail the pipeline with fca's SIGPIPE.
info=$(fca info)
grep -qF "$version" <<<"$info" || fail "fca info does not report version $version"
models=$(fca models)
grep -q tiny-dense <<<"$models" || fail "fca models does not list the tiny models"
fca datasets upload --name=eval "$work/data/eval.txt"
fca datasets upload --name=calib "$work/data/calib.txt"
job=$(fca audit --models=tiny --dense_twin=tiny-dense --eval=eval --calib=calib --window=16 \
  --batch=4 --max_eval_windows=32 --max_calib_windows=32 --bootstrap=200 --timing_repeats=2 \
  --detach)
echo "submitted job $job"
fca watch "$job" >"$work/watch.log" || { cat "$work/watch.log" >&2; fail "fca watch $job"; }
fca report "$job" | tee "$work/report.txt"
grep -q tiny "$work/report.txt" || fail "the report does not name the model"
job_state=$(fca jobs show "$job")
grep -qi succeeded <<<"$job_state" || fail "job $job did not succeed"

# SIGTERM drains and exits 0.
kill -TERM "$server_pid"
status=0
wait "$server_pid" || status=$?
server_pid=
[ "$status" = 0 ] || { cat "$work/server.log" >&2; fail "fca-server exited $status on SIGTERM"; }
echo "package_smoke: OK ($((SECONDS - start)) s)"
