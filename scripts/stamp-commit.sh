#!/usr/bin/env bash
# Writes the current git commit into Sources/CBuildInfo/commit.h (ignored by git) for `klarna-reconciler --version`,
# and touches the C file that includes it so the next build recompiles it. Nothing changes when the commit is the same.
set -euo pipefail
cd "$(dirname "$0")/.."
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit-modified"; fi
line="#define KLARNA_RECONCILER_COMMIT \"$commit\""
header=Sources/CBuildInfo/commit.h
if [ "$(cat "$header" 2>/dev/null)" != "$line" ]; then
    echo "$line" >"$header"
    touch Sources/CBuildInfo/build_info.c
fi
echo "$commit"
