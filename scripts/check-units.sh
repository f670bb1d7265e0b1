#!/usr/bin/env bash
# The shipped files as systemd reads them: `systemd-analyze verify` on each (with ExecStart= pointing at the built
# binary, since nothing is installed here) and `systemd-analyze security --offline=true` on the service, which must
# score OK at 1.5 or better; the journal catalog compiles. Usage: scripts/check-units.sh path/to/klarna-reconciler
set -euo pipefail
BIN=$(realpath "$1")
REPO=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for unit in klarna-reconciler.service klarna-reconciler.socket klarna-reconciler-control.socket; do
    sed "s#/usr/local/bin/klarna-reconciler#$BIN#g" "$REPO/systemd/$unit" >"$T/$unit"
done
# verify prints problems and exits non-zero on errors; warnings about the sandbox host are not the unit's.
systemd-analyze verify "$T/klarna-reconciler.service" "$T/klarna-reconciler.socket" "$T/klarna-reconciler-control.socket"
echo "systemd-analyze verify: klarna-reconciler.service, .socket and -control.socket are clean"
# --threshold is on the internal 0-100 scale: 15 is exposure 1.5.
systemd-analyze security --offline=true --threshold=15 "$T/klarna-reconciler.service" | tail -1
# The journal catalog compiles, and every entry in it is one journalctl knows afterwards.
mkdir -p "$T/root/usr/lib/systemd/catalog"
cp "$REPO/systemd/klarna-reconciler.catalog" "$T/root/usr/lib/systemd/catalog/"
journalctl --root="$T/root" --update-catalog
entries=$(grep -c '^-- [0-9a-f]\{32\}$' "$REPO/systemd/klarna-reconciler.catalog")
known=$(journalctl --root="$T/root" --list-catalog | grep -c ' klarna-reconciler: ')
[ "$known" -eq "$entries" ] || { echo "journal catalog: $known of $entries entries compiled"; exit 1; }
echo "journal catalog: all $entries entries compile"
