#!/usr/bin/env bash
# Builds the API reference with Doxygen (docs/Doxyfile) into OUT (default build/api/html) and
# fails on any warning: a documentation error anywhere in include/typeflow, or an undocumented
# member of the public face (runtime/session.hpp, options.hpp, variables.hpp, feed.hpp).
#   bash scripts/api_docs.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-build/api}"
if ! command -v doxygen >/dev/null 2>&1; then
  echo "skipped: doxygen is not installed (bash scripts/install-deps.sh installs it)"
  exit 77
fi
mkdir -p "$out"
status=0
run() { # $1: warnings file; the rest: settings that override docs/Doxyfile
  local log="$1"
  shift
  { cat docs/Doxyfile; printf '%s\n' "$@" "WARN_LOGFILE = $log"; } | doxygen - >/dev/null
  if [[ -s "$log" ]]; then
    echo "api_docs: doxygen warned ($log):" >&2
    cat "$log" >&2
    status=1
  fi
}
# The whole reference.
run "$out/warnings.txt" "OUTPUT_DIRECTORY = $out"
# The public face, every member documented.
run "$out/undocumented.txt" "OUTPUT_DIRECTORY = $out/face" \
  "INPUT = include/typeflow/runtime/session.hpp include/typeflow/runtime/options.hpp \
include/typeflow/runtime/variables.hpp include/typeflow/runtime/feed.hpp" \
  "USE_MDFILE_AS_MAINPAGE =" "WARN_IF_UNDOCUMENTED = YES" "HIDE_UNDOC_MEMBERS = NO" \
  "HIDE_UNDOC_CLASSES = NO"
if [[ $status -eq 0 ]]; then
  echo "api_docs: $out/html/index.html (no warnings)"
fi
exit $status
