#!/usr/bin/env bash
# check_docs.sh — keeps the repository self-contained and its comments about the code: every
# relative Markdown link resolves to a file or folder inside the repository, no link leaves it, and
# no source, script or document speaks of the project's history instead of the code.
# Usage: bash tests/check_docs.sh [REPO_ROOT]; exit 0 when clean, 1 with one line per problem.
set -u
root=$(cd "${1:-$(dirname "$0")/..}" && pwd -P)
cd "$root" || exit 1

# The files of the repository: git's view when there is one (ignored local folders stay out), else
# every file outside hidden folders; build folders (build*/, out/) are left out either way.
list_files() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard
  else
    find . \( -name '.?*' -o -name 'build*' -o -name out \) -prune -o -type f -print0 | sed -z 's|^\./||'
  fi | grep -zvE '^(build[^/]*|out)/'
}
mapfile -d '' files < <(list_files)

fail=0
problem() {
  echo "check_docs: $*"
  fail=1
}

# ---- links --------------------------------------------------------------------------------------
# Inline links and images, [text](target "title"), outside fenced code blocks and code spans; and
# reference definitions, [name]: target. Anchors are ignored; http(s) and mailto links are not
# repository paths and are left alone.
links_of() {
  awk '
    /^[ \t]*(```|~~~)/ { fence = !fence; next }
    fence { next }
    {
      line = $0
      gsub(/`[^`]*`/, "", line)
      if (match(line, /^[ \t]*\[[^]]+\]:[ \t]+[^ \t]+/)) {
        def = substr(line, RSTART, RLENGTH)
        sub(/^[ \t]*\[[^]]+\]:[ \t]+/, "", def)
        print NR "\t" def
      }
      while (match(line, /\]\([^)]*\)/)) {
        t = substr(line, RSTART + 2, RLENGTH - 3)
        line = substr(line, RSTART + RLENGTH)
        sub(/^[ \t]*</, "", t); sub(/>[ \t]*$/, "", t)
        sub(/[ \t]+"[^"]*"[ \t]*$/, "", t)
        print NR "\t" t
      }
    }' "$1"
}

for f in "${files[@]}"; do
  [[ $f == *.md && -f $f ]] || continue
  dir=$(dirname "$f")
  while IFS=$'\t' read -r line target; do
    case $target in
      http://* | https://* | mailto:*) continue ;;
      '' | '#'*) continue ;;
      *:*) problem "$f:$line: link '$target' is not a repository path"; continue ;;
      /*) problem "$f:$line: link '$target' is absolute (it leaves the repository)"; continue ;;
    esac
    path=${target%%#*}
    path=${path%%\?*}
    [[ -z $path ]] && continue
    resolved=$(realpath -m "$dir/$path")
    if [[ $resolved != "$root" && $resolved != "$root"/* ]]; then
      problem "$f:$line: link '$target' leaves the repository"
    elif [[ ! -e $resolved ]]; then
      problem "$f:$line: link '$target' does not resolve (no ${resolved#"$root"/})"
    fi
  done < <(links_of "$f")
done

# ---- history in comments and docs -----------------------------------------------------------------
# Comments and documents describe the code, not how it came to be: no references to work sessions,
# briefs, issue numbers or design notes kept outside the repository. (The pattern is spelt so that
# this file does not match it.)
pattern='session ?[0-9]|brief [A-Z][0-9]|issue ?#?[0-9]|MASKED_EM\.md|shared/DESIG[N]|DESIGN\.md|DESIG[N] §'
for f in "${files[@]}"; do
  case $f in
    *.c | *.h | *.cu | *.cuh | *.md | *.sh | *.py | *.txt) ;;
    *) continue ;;
  esac
  [[ -f $f ]] || continue
  while IFS= read -r hit; do
    problem "$f:$hit"
  done < <(grep -niE "$pattern" "$f")
done

if [[ $fail -eq 0 ]]; then
  echo "check_docs: ok (${#files[@]} files)"
fi
exit $fail
