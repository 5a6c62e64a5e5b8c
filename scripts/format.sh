#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# clang-format (the tree's .clang-format: Google style, 100 columns) over every tracked C, C++
# and CUDA source.
#   scripts/format.sh           format the files in place
#   scripts/format.sh --check   change nothing; list the files that need formatting, exit 1
set -euo pipefail
cd "$(dirname "$0")/.."
format=${CLANG_FORMAT:-clang-format}
if ! command -v "$format" >/dev/null 2>&1; then
  echo "format: $format not found (scripts/setup.sh installs clang-format)" >&2
  exit 2
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.c' '*.cc' '*.h' '*.cu')
else  # a source tarball: the same folders
  mapfile -t files < <(find apps bench fuzz include python src tests \
                         \( -name '*.c' -o -name '*.cc' -o -name '*.h' -o -name '*.cu' \) | sort)
fi
if [ "${1:-}" = "--check" ]; then
  unformatted=()
  for f in "${files[@]}"; do
    "$format" --dry-run --Werror "$f" >/dev/null 2>&1 || unformatted+=("$f")
  done
  if [ ${#unformatted[@]} -gt 0 ]; then
    echo "format: ${#unformatted[@]} of ${#files[@]} files need clang-format (scripts/format.sh fixes them):" >&2
    printf '  %s\n' "${unformatted[@]}" >&2
    exit 1
  fi
  echo "format: all ${#files[@]} files formatted ($("$format" --version))"
  exit 0
fi
"$format" -i "${files[@]}"
