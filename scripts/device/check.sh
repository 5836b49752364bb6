#!/usr/bin/env bash
# The GPU check (docs/developing.md, "On a GPU"), run on a lent GPU machine
# in a copy of the checkout that carries out/device (scripts/device/pack.sh):
#
#   scripts/device/check.sh OUTDIR [BACK]
#
# configures fca's engine build (FCA_ENGINE_ONLY) against the machine's
# libtorch (python3's torch wheel: torch.utils.cmake_prefix_path) and the
# unpacked dependency pack, with rpaths into both, so nothing is installed;
# builds what the checks need on every core, keeping going past errors so
# that one build reports all of them; runs the checks; and writes each
# step's log, the checks' JSON and OUTDIR/summary.json (every step's exit
# status and seconds) and OUTDIR/summary.txt. With BACK (the device tool's
# $OUT, which brings back 8 files at most), also BACK/summary.txt,
# BACK/summary.json and all of OUTDIR as BACK/check.tar.xz.
#
# Here, against Debian's libtorch on the CPU (the dry run that finds a
# missing header or library before a GPU machine does):
#
#   FCA_DEVICE=cpu scripts/device/dry_run.sh OUTDIR
#
# Environment:
#   FCA_DEVICE       the device the checks run on (cuda:0; cpu for a dry run)
#   FCA_CHECK_STEPS  the steps to run, comma-separated (default: all, in order:
#                    env,unpack,configure,build,linkage,engine_test,device_check,
#                    audit,olmoe_1b7b)
#   FCA_JOBS         build jobs (default: every core)
#   FCA_BUILD_DIR    the build folder (default: build-device)
#   FCA_PACK_DIR     where pack.tar.xz is (default: out/device)
# The exit status is 0 when every step that ran passed, else 1.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 1 ] || [ $# -eq 2 ] || { echo "usage: scripts/device/check.sh OUTDIR [BACK]" >&2; exit 2; }
mkdir -p "$1"
out=$(cd "$1" && pwd)
back=${2:-}
# What the summary reads is this run's only.
rm -f "$out"/summary.* "$out"/env.json "$out"/engine_test.json "$out"/device_check.json \
  "$out"/linkage.log
device=${FCA_DEVICE:-cuda:0}
steps=${FCA_CHECK_STEPS:-env,unpack,configure,build,linkage,engine_test,device_check,audit,olmoe_1b7b}
jobs=${FCA_JOBS:-$(nproc)}
build=${FCA_BUILD_DIR:-build-device}
pack_dir=${FCA_PACK_DIR:-out/device}
root=$PWD/$build/pack-root  # the unpacked pack (inside the ignored build folder)
lib=$root/usr/lib/x86_64-linux-gnu
corpus=$root/usr/share/games/fortunes  # the demo's corpus, from the pack
py=${PYTHON:-python3}
results=()

# Runs step NAME (a function) if FCA_CHECK_STEPS names it; its output goes to
# OUTDIR/NAME.log, its status and time to the summary.
step() {
  local name=$1
  case ",$steps," in *",$name,"*) ;; *) return 0 ;; esac
  local start=$SECONDS rc
  echo "check: $name ..."
  "step_$name" > "$out/$name.log" 2>&1
  rc=$?
  echo "check: $name: exit $rc, $((SECONDS - start)) s"
  results+=("{\"step\": \"$name\", \"exit\": $rc, \"seconds\": $((SECONDS - start))}")
}

step_env() {
  date -u +%Y-%m-%dT%H:%M:%SZ
  uname -a
  nproc
  (command -v nvidia-smi && nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader) || echo "no nvidia-smi"
  command -v nvcc && nvcc --version | tail -2
  cmake --version | head -1
  c++ --version | head -1
  "$py" - "$out/env.json" <<'PY'
import json, platform, sys
info = {"python": platform.python_version()}
try:
    import torch
    info.update(torch=torch.__version__, cuda=torch.version.cuda,
                cuda_available=torch.cuda.is_available(),
                cmake_prefix_path=torch.utils.cmake_prefix_path,
                cxx11_abi=bool(torch._C._GLIBCXX_USE_CXX11_ABI))
    if torch.cuda.is_available():
        info["device_name"] = torch.cuda.get_device_name(0)
except ImportError:
    info["torch"] = None
print(json.dumps(info, indent=2))
json.dump(info, open(sys.argv[1], "w"), indent=2)
PY
}

step_unpack() {
  rm -rf "$root" && mkdir -p "$root" &&
    tar -xJf "$pack_dir/pack.tar.xz" -C "$root" && head -16 "$pack_dir/pack-manifest.txt" &&
    { [ -d "$corpus" ] || { echo "the pack has no $corpus: rerun scripts/device/pack.sh"; return 1; }; }
}

# libtorch: the python wheel's where there is one, else CMake's default
# search (Debian's /usr).
torch_prefix() {
  "$py" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true
}

step_configure() {
  local args=(-S . -B "$build" -G Ninja -DFCA_ENGINE_ONLY=ON -DFCA_WERROR=OFF
    -DCMAKE_BUILD_TYPE=RelWithDebInfo
    # pkg-config is not assumed (PCRE2's fallback in CMakeLists.txt).
    -DFCA_PKG_CONFIG=OFF
    "-DCMAKE_PREFIX_PATH=$(torch_prefix);$root/usr"
    # The pack's packages, named, so that a copy installed elsewhere on the
    # machine is not taken instead.
    "-Dabsl_DIR=$lib/cmake/absl" "-Dglog_DIR=$lib/cmake/glog" "-Dgflags_DIR=$lib/cmake/gflags"
    "-DGTest_DIR=$lib/cmake/GTest" "-DOPENSSL_ROOT_DIR=$root/usr"
    # FindOpenSSL searches a root's lib and lib64 only, not Debian's
    # multiarch folder, and would fall back to pkg-config's view of the
    # machine: the library is named.
    "-DOPENSSL_CRYPTO_LIBRARY=$lib/libcrypto.so"
    # glog's find module for libunwind (its config names /usr/share/glog/cmake,
    # which only a machine with Debian's glog has).
    "-DCMAKE_MODULE_PATH=$root/usr/share/glog/cmake"
    "-DPCRE2_INCLUDE_DIR=$root/usr/include" "-DPCRE2_LIBRARY=$lib/libpcre2-8.so"
    "-DCMAKE_BUILD_RPATH=$lib"
    # DT_RPATH, not RUNPATH: it also finds the libraries that the pack's own
    # libraries need (libabsl_base for libabsl_strings, ...), which a RUNPATH,
    # searched for a program's direct dependencies only, would leave to the
    # machine, where there are none.
    "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags"
    # Debian's multiarch headers (OpenSSL's opensslconf.h, ...): a system
    # include folder on Debian, not under the pack's root.
    "-DCMAKE_CXX_FLAGS=-isystem $root/usr/include/x86_64-linux-gnu")
  if command -v nvcc > /dev/null; then
    args+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
    export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}  # H100/H200; no detection run
  fi
  cmake "${args[@]}"
}

readonly targets=(engine_test device_check_test fca-local-audit fca-train fca_checkpoint_bench)

# Keeps going (-k 0): the first build against a new libtorch reports every
# error at once. The errors are also counted into build_errors.txt.
step_build() {
  local rc
  ninja -C "$build" -k 0 -j "$jobs" "${targets[@]}"
  rc=$?
  grep -c ': error:' "$out/build.log" > "$out/build_errors.txt"
  return $rc
}

# Every built program resolves the pack's libraries from the pack (its
# rpath), not from wherever the machine might have others.
step_linkage() {
  local bad=0 t
  for t in "${targets[@]}"; do
    echo "== $t"
    [ -x "$build/bin/$t" ] || { echo "!! $t was not built"; bad=1; continue; }
    ldd "$build/bin/$t" > "$out/ldd-$t.txt"
    # Every library the pack holds must come from the pack.
    local name arrow path rest
    while read -r name arrow path rest; do
      [ "$arrow" = "=>" ] && [ -e "$lib/$name" ] || continue
      case $path in
        "$root"/*) echo "   $name from the pack" ;;
        *) echo "!! $t takes $name from $path, not from the pack"; bad=1 ;;
      esac
    done < "$out/ldd-$t.txt"
    grep -q 'not found' "$out/ldd-$t.txt" && { echo "!! $t has unresolved libraries"; bad=1; }
  done
  return $bad
}

# The engine's suites, their models on $device (FCA_TEST_DEVICE,
# tests/testing/test_models.h).
step_engine_test() {
  FCA_TEST_DEVICE=$device FCA_TEST_CORPUS_DIR=$corpus "$build/bin/engine_test" --gtest_output="json:$out/engine_test.json"
}

# Audits on $device against the CPU (tests/device/device_check_test.cc).
step_device_check() {
  FCA_TEST_DEVICE=$device "$build/bin/device_check_test" \
    --gtest_output="json:$out/device_check.json"
}

# A whole audit of featuregate-s1 with its dense twin, every intervention,
# every window of the demo's evaluation and calibration texts, through the
# engine's entry point (fca-local-audit, RunAudit, as a worker runs it), on
# $device and on the CPU, each report beside the other.
step_audit() {
  local data=$build/split rc=0 d devices=("$device")
  mkdir -p "$data" && "$build/bin/fca-train" split --corpus="$corpus" --out="$data" || return 1
  [ "$device" = cpu ] || devices+=(cpu)
  for d in "${devices[@]}"; do
    echo "== $d"
    "$build/bin/fca-local-audit" audit --device="$d" --models=models/featuregate-s1 \
      --dense_twin=models/dense --eval="$data/eval.txt" --calib="$data/calib.txt" \
      --max_eval_windows=0 --max_calib_windows=0 --json="$out/audit-${d//:/}.json" || rc=1
  done
  return $rc
}

# The OLMoE-1B-7B-shaped random checkpoint (bench/olmoe_1b7b.py writes it):
# fca LIVE and REPLAY at T = 512 against the eager PyTorch forward on
# $device, one after the other, with bench/olmoe_1b7b.py's summary; and the
# peak GPU memory of fca's run (nvidia-smi's memory.used every 100 ms, the
# CUDA context included) against the weights.
step_olmoe_1b7b() {
  local dir=$build/olmoe-1b-7b-random sampler rc
  [ "$device" != cpu ] || { echo "skipped: a CPU run is bench/olmoe_1b7b.sh's"; return 0; }
  [ -f "$dir/model.safetensors.index.json" ] || "$py" bench/olmoe_1b7b.py write "$dir" || return 1
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 \
    > "$out/olmoe_1b7b_gpu_memory_mib.txt" &
  sampler=$!
  "$build/bin/fca_checkpoint_bench" --model="$dir" --device="$device" --seq=512 --repeats=5 \
    --json="$out/olmoe_1b7b_fca.json"
  rc=$?
  kill "$sampler"
  [ "$rc" -eq 0 ] || return "$rc"
  echo "peak GPU memory during fca's run: $(sort -n "$out/olmoe_1b7b_gpu_memory_mib.txt" | tail -1) MiB"
  "$py" bench/olmoe_1b7b.py eager "$dir" --device="${device%%:*}" --seq=512 --repeats=5 \
    --json="$out/olmoe_1b7b_eager.json" &&
    "$py" bench/olmoe_1b7b.py summary "$out/olmoe_1b7b_fca.json" "$out/olmoe_1b7b_eager.json"
}

start=$SECONDS
for s in env unpack configure build linkage engine_test device_check audit olmoe_1b7b; do
  step "$s"
done
{
  echo "{\"device\": \"$device\", \"seconds\": $((SECONDS - start)), \"steps\": ["
  (IFS=,; echo "${results[*]}")
  echo "]}"
} > "$out/summary.json"
# "name: N tests, M failures" of a GoogleTest JSON report.
test_counts() {
  [ -f "$out/$1.json" ] || { echo "$1: no report"; return 0; }
  echo "$1: $(grep -m1 -o '"tests": [0-9]*' "$out/$1.json" | grep -o '[0-9]*') tests," \
    "$(grep -m1 -o '"failures": [0-9]*' "$out/$1.json" | grep -o '[0-9]*') failures"
}
failed=0
{
  echo "fca device check on $device, $(date -u +%Y-%m-%dT%H:%M:%SZ), $((SECONDS - start)) s"
  for r in "${results[@]}"; do echo "$r"; done
  [ -f "$out/env.json" ] && tr -d '\n' < "$out/env.json" | tr -s ' ' && echo
  test_counts engine_test
  test_counts device_check
  [ -f "$out/linkage.log" ] &&
    echo "libraries resolved from the pack (${#targets[@]} programs): $(grep -c '^   .* from the pack$' "$out/linkage.log")"
} | tee "$out/summary.txt"
for r in "${results[@]}"; do case $r in *'"exit": 0,'*) ;; *) failed=1 ;; esac; done
if [ -n "$back" ]; then
  mkdir -p "$back" && cp "$out/summary.txt" "$out/summary.json" "$back/" &&
    tar -cJf "$back/check.tar.xz" -C "$(dirname "$out")" "$(basename "$out")"
fi
exit $failed
