#!/usr/bin/env bash
# Each source's compile command in build/compile_commands.json, one
# "command<TAB>file" line per source, the command as the file has it (JSON
# escapes kept). A batch of a unity build (cmake/unity.cmake,
# tests/CMakeLists.txt) stands for each source it includes: the source takes
# the batch's command (a target's flags are the same for all its sources),
# whose input is the batch. scripts/tidy.sh and scripts/thread_safety.sh
# read it; CMake writes one "command" and one "file" line per entry.
set -euo pipefail
cd "$(dirname "$0")/.."
while IFS=$'\t' read -r command file; do
  if [[ $file == */Unity/unity_*.cxx ]]; then
    while IFS= read -r source; do
      printf '%s\t%s\n' "$command" "$source"
    done < <(sed -n 's/^#include "\(.*\)"$/\1/p' "$file")
  else
    printf '%s\t%s\n' "$command" "$file"
  fi
done < <(sed -n -e 's/^  "command": "\(.*\)",$/\1/p' -e 's/^  "file": "\(.*\)",\{0,1\}$/\1/p' \
  build/compile_commands.json | paste - -)
