#!/usr/bin/env bash
# Format the tracked C, CUDA and header sources with the repository's .clang-format.
#   scripts/format.sh           rewrite them in place
#   scripts/format.sh --check   list the files that are not formatted; exit 1 if there are any
# CLANG_FORMAT names the binary (default clang-format; the style is written for version 14).
set -euo pipefail
cd "$(dirname "$0")/.."
cf=${CLANG_FORMAT:-clang-format}
mode=fix
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  *) echo "usage: scripts/format.sh [--check]" >&2; exit 2 ;;
esac
if ! command -v "$cf" >/dev/null 2>&1; then
  echo "format.sh: $cf not found (scripts/install-deps.sh installs it)" >&2
  exit 2
fi
major=$("$cf" --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
[ "$major" = 14 ] || echo "format.sh: warning: $cf is version ${major:-unknown}; the style is checked with 14" >&2
if ! list=$(git ls-files '*.c' '*.h' '*.cu' '*.cuh'); then
  echo "format.sh: not a git checkout: the tracked sources are unknown" >&2
  exit 2
fi
files=()
while IFS= read -r f; do
  [ -f "$f" ] && files+=("$f") # skip files deleted in the work tree but still in the index
done <<<"$list"
if [ "$mode" = fix ]; then
  [ ${#files[@]} -eq 0 ] || "$cf" -i --style=file "${files[@]}"
  exit 0
fi
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
bad=0
for f in "${files[@]}"; do
  if ! "$cf" --style=file "$f" >"$tmp"; then
    echo "format.sh: $cf failed on $f" >&2
    bad=1
  elif ! cmp -s "$tmp" "$f"; then
    echo "$f"
    bad=1
  fi
done
[ $bad -eq 0 ] || echo "format.sh: not formatted (run scripts/format.sh to fix)" >&2
exit $bad
