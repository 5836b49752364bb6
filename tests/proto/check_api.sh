#!/usr/bin/env bash
# The fca.v1 API's stability checks (ctest proto_api_test; buf from
# tests/proto/setup.sh):
#   1. buf lint of proto/ (proto/buf.yaml);
#   2. buf breaking of proto/ against the last release: the newest tag v*
#      (its proto/ from git), or, while no release is tagged, the committed
#      image tests/proto/api-baseline.json (buf build of proto/ at 0.1.0);
#   3. that the check can fail: a copy of proto/ with one field renumbered
#      must be refused, and a copy with one field added must pass.
#
#   tests/proto/check_api.sh                 run the checks
#   tests/proto/check_api.sh --write-baseline  rewrite api-baseline.json from proto/
#   FCA_API_RELEASE=REF tests/proto/check_api.sh  against REF's proto/ instead
#
# Exit 77 (ctest SKIP_RETURN_CODE) when buf is not installed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
buf=${BUF:-$here/node_modules/.bin/buf}
baseline=$here/api-baseline.json
accepted=$here/accepted-changes.txt
if [ ! -x "$buf" ]; then
  echo "check_api: SKIP: $buf not found (run tests/proto/setup.sh)"
  exit 77
fi
fail() {
  echo "check_api: FAIL: $*" >&2
  exit 1
}
work=$(mktemp -d "${TMPDIR:-/tmp}/fca_check_api.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The repository is the input root: worker_service.proto imports
# "proto/fca/v1/audit_service.proto" (proto/buf.yaml says why).
build_image() {  # DIR OUT: the image of DIR/proto
  (cd "$1" && "$buf" build . --config "$root/proto/buf.yaml" --path proto \
    --exclude-source-info -o "$2")
}
buf_breaking() {  # DIR AGAINST: buf breaking of DIR/proto against an image
  (cd "$1" && "$buf" breaking . --config "$root/proto/buf.yaml" --path proto \
    --against "$2")
}
# buf breaking, less the findings reviewed and accepted in accepted-changes.txt
# (each names its reason there): what is left fails, printed.
breaking() {  # DIR AGAINST
  local out left
  out=$(buf_breaking "$1" "$2" 2>&1) && return 0
  left=$(printf '%s\n' "$out" | sed -E 's/^[^:]+:[0-9]+:[0-9]+://' |
    grep -vxF -f <(grep -v '^#' "$accepted" | grep .) || true)
  if [ -n "$left" ]; then
    printf '%s\n' "$left"
    return 1
  fi
  echo "check_api: buf breaking found only accepted changes (tests/proto/accepted-changes.txt):"
  printf '%s\n' "$out" | sed 's/^/  /'
}

if [ "${1:-}" = "--write-baseline" ]; then
  build_image "$root" "$work/image.json"
  python3 -m json.tool --indent 1 "$work/image.json" >"$baseline"
  echo "check_api: wrote $baseline"
  exit 0
fi

(cd "$root" && "$buf" lint . --config proto/buf.yaml --path proto) || fail "buf lint"
echo "check_api: buf lint: OK"

# FCA_API_RELEASE: another git ref to check against (e.g. main).
tag=${FCA_API_RELEASE:-$(git -C "$root" tag --list 'v*' --sort=-version:refname 2>/dev/null | head -1)}
if [ -n "$tag" ]; then
  mkdir -p "$work/release"
  git -C "$root" archive "$tag" proto | tar -x -C "$work/release"
  build_image "$work/release" "$work/against.json"
  against=$work/against.json
  echo "check_api: the last release: $tag"
else
  against=$baseline
  echo "check_api: no release tag v*: against $baseline"
fi
breaking "$root" "$against" || fail "buf breaking against ${tag:-the baseline}"
echo "check_api: buf breaking: OK"

# The check fails on a renumbered field (Job.owner, 2 -> 42) ...
mkdir -p "$work/renumbered" "$work/added"
cp -r "$root/proto" "$work/renumbered/"
sed -i 's/^  string owner = 2;$/  string owner = 42;/' "$work/renumbered/proto/fca/v1/audit_service.proto"
! cmp -s "$root/proto/fca/v1/audit_service.proto" "$work/renumbered/proto/fca/v1/audit_service.proto" ||
  fail "the renumbering sed changed nothing"
if breaking "$work/renumbered" "$baseline" >"$work/renumbered.out" 2>&1; then
  fail "buf breaking accepted a renumbered field"
fi
grep -q 'owner' "$work/renumbered.out" || fail "buf breaking did not name the field: $(cat "$work/renumbered.out")"
echo "check_api: a renumbered field is refused:"
sed 's/^/  /' "$work/renumbered.out"
# ... and passes an added one (a number no real field will take).
cp -r "$root/proto" "$work/added/"
sed -i 's/^  string calib_sha256 = 13;$/&\n  string added_field = 999;/' "$work/added/proto/fca/v1/audit_service.proto"
grep -q 'added_field = 999' "$work/added/proto/fca/v1/audit_service.proto" || fail "the added-field sed changed nothing"
breaking "$work/added" "$baseline" || fail "buf breaking refused an added field"
echo "check_api: an added field passes: OK"
