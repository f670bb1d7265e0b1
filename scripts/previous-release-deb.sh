#!/usr/bin/env bash
# Prints the path of the previous release's .deb, building it first when this clone has not built it yet: the newest
# release tag (v*) below the version this checkout builds, checked out in a scratch worktree and packaged by that
# release's own scripts/build-deb.sh. The package's upgrade test installs it and then the new .deb over it.
# Cached in .build/previous-release/ by commit, so a second run on one machine costs nothing.
# Usage: scripts/previous-release-deb.sh NEW_VERSION   (the version of the .deb being tested, e.g. 0.2.0)
set -euo pipefail
cd "$(dirname "$0")/.."
NEW_VERSION=$1
CACHE=$PWD/.build/previous-release

# The newest tag whose version sorts below the new one (dpkg's ordering, as apt will compare them); in a clone made
# without tags, the commit v0.1.0 was made from.
PINNED=6c8e710a6b29
TAG=
for tag in $(git tag --list 'v[0-9]*' --merged HEAD --sort=-version:refname); do
    if dpkg --compare-versions "${tag#v}" lt "$NEW_VERSION"; then TAG=$tag; break; fi
done
if [ -z "$TAG" ]; then
    git cat-file -e "$PINNED^{commit}" 2>/dev/null ||
        { echo "no release tag below $NEW_VERSION is reachable from HEAD (git tag --list 'v*'), nor commit $PINNED" >&2; exit 1; }
    echo "no release tag in this clone: the previous release is built from commit $PINNED (v0.1.0)" >&2
    TAG=$PINNED
fi
COMMIT=$(git rev-parse --short=12 "$TAG^{commit}")
VERSION=$(git show "$COMMIT:Sources/KlarnaAPI/Client/KlarnaConfiguration.swift" | sed -n 's/.*static let version = "\(.*\)".*/\1/p')
DEB=$CACHE/klarna-reconciler_${VERSION}_${COMMIT}_amd64.deb
if [ -s "$DEB" ]; then echo "$DEB"; exit 0; fi

mkdir -p "$CACHE"
SRC=$CACHE/src-$COMMIT
git worktree remove --force "$SRC" >/dev/null 2>&1 || rm -rf "$SRC"
git worktree prune
git worktree add --detach --quiet "$SRC" "$TAG" >&2
echo "building the previous release, $TAG (commit $COMMIT), for the upgrade test" >&2
(cd "$SRC" && scripts/build-deb.sh) >&2
mv "$SRC"/dist/klarna-reconciler_*_amd64.deb "$DEB"
git worktree remove --force "$SRC"
echo "$DEB"
