#!/usr/bin/env bash
# clang's thread-safety analysis (-Wthread-safety -Wthread-safety-beta;
# findings are errors) over the translation units that hold annotated locks:
# the ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED / ... annotations are
# checked by the compiler, not only read. GCC ignores them. Needs a build
# (build/compile_commands.json and the generated headers; scripts/build.sh).
#
#   scripts/thread_safety.sh             the units below
#   scripts/thread_safety.sh FILE.cc ... those units
#
# The units: those of every source that, or whose header of the same name,
# uses a lock annotation or an annotated mutex (LOCK_PATTERN); a source
# compiled in a batch is checked with its batch. Every annotated field and
# mutex is private, so only its class's code (inline in the header or in
# that source) can touch it, and the analysis needs nothing else; units that
# merely include an annotated header are left out (a torch unit costs clang
# 5-10 s: it parses the torch headers without GCC's precompiled header).
# The run checks that each annotated header was read by some unit.
# -fsyntax-only: the analysis is part of semantic checking, nothing is built.
# -Wthread-safety-beta checks ABSL_ACQUIRED_BEFORE / ABSL_ACQUIRED_AFTER.
set -euo pipefail
cd "$(dirname "$0")/.."
clang=${CLANG:-clang++-14}
command -v "$clang" >/dev/null || {
  echo "thread_safety: $clang not found (apt-get install clang-14)" >&2
  exit 2
}
[ -f build/compile_commands.json ] || {
  echo "thread_safety: build first (scripts/build.sh)" >&2
  exit 2
}
readonly LOCK_PATTERN='ABSL_[A-Z_]*(GUARDED_BY|LOCKS_REQUIRED|LOCKS_EXCLUDED|LOCKABLE|LOCK_FUNCTION|ACQUIRED_BEFORE|ACQUIRED_AFTER|ASSERT_[A-Z_]*LOCK)|absl::(Mutex|MutexLock|ReaderMutexLock|WriterMutexLock)\b|RecursiveMutex'
root=$(pwd)

wanted=()  # the FILES given, absolute
for f in "$@"; do wanted+=("$(realpath -m "$f")"); done
annotated=()
[ $# -gt 0 ] || mapfile -t annotated < <(git grep --untracked -lE "$LOCK_PATTERN" -- '*.h' '*.cc')
is_selected() {  # FILE, relative to the root
  local a
  for a in "${wanted[@]}"; do [ "$a" = "$root/$1" ] && return 0; done
  for a in "${annotated[@]}"; do [ "$a" = "$1" ] || [ "$a" = "${1%.cc}.h" ] && return 0; done
  return 1
}

# One response file per unit: its compile command (scripts/compile_units.sh)
# with only the flags that select code (-D, -I, -isystem, -std, -pthread),
# so GCC's own flags and its precompiled header stay out. A source compiled
# in a batch (cmake/unity.cmake) is checked with its whole batch, once for
# all the batch's sources: 18 units instead of 38, 59 CPU s instead of 100,
# each batch's headers parsed once.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
units=()
sources=()            # the selected sources
declare -A checked=()  # unit -> 1
words=()  # set by eval below
while IFS=$'\t' read -r command file; do
  rel=${file#"$root"/}
  [[ $rel == build/* ]] && continue  # generated sources
  is_selected "$rel" || continue
  sources+=("$rel")
  unit=${command##* -c }  # the command's input: the source, or its batch
  [ -z "${checked[$unit]:-}" ] || continue
  checked[$unit]=1
  command=${command//\\\\/\\}
  command=${command//\\\"/\"}
  eval "words=($command)"
  args=(-fsyntax-only -Wthread-safety -Wthread-safety-beta -Werror=thread-safety
    -Werror=thread-safety-beta)
  for ((i = 1; i < ${#words[@]}; i++)); do
    case ${words[i]} in
      -D* | -I* | -std=* | -pthread) args+=("${words[i]}") ;;
      -isystem) args+=("${words[i]}" "${words[i + 1]}") && i=$((i + 1)) ;;
    esac
  done
  rsp="$work/${#units[@]}.rsp"
  printf '%q\n' "${args[@]}" -MD -MF "$work/${#units[@]}.d" "$unit" >"$rsp"
  units+=("${unit#"$root"/}")
done < <(scripts/compile_units.sh)
[ ${#units[@]} -gt 0 ] || { echo "thread_safety: no unit to check" >&2; exit 2; }
[ ${#wanted[@]} -eq 0 ] || [ ${#sources[@]} -eq ${#wanted[@]} ] || {
  echo "thread_safety: some FILES are not sources in build/compile_commands.json" >&2
  exit 2
}

# As many at a time as the build (scripts/build_jobs.sh). xargs exits non-zero when
# any unit has a finding.
if ! printf '@%s\0' "$work"/*.rsp | xargs -0 -n 1 -P "$(scripts/build_jobs.sh)" "$clang"; then
  echo "thread_safety: findings above (-Wthread-safety)" >&2
  exit 1
fi
for header in "${annotated[@]}"; do
  [[ $header == *.h ]] || continue
  grep -qF "$root/$header" "$work"/*.d || {
    echo "thread_safety: no checked unit reads $header (give it a .cc of the same name)" >&2
    exit 1
  }
done
echo "thread_safety: ${#sources[@]} sources in ${#units[@]} units clean: ${sources[*]}"
