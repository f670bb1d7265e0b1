#!/usr/bin/env bash
# Builds dist/klarna-reconciler_VERSION_amd64.deb: the release binary with the Swift runtime and Foundation linked
# statically (only Debian's libraries stay shared, and Depends: lists exactly those, from dpkg-shlibdeps), the units
# at the package paths, sysusers.d/tmpfiles.d in /usr/lib, the journal catalog, the example config as a conffile,
# the README, the changelog, the copyright and the man page. Usage: scripts/build-deb.sh (`make deb` runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SCRATCH=.build/static        # its own build folder: the static link must not replace the development binaries
STAGE=.build/deb/klarna-reconciler
MAINTAINER="klarna-reconciler maintainers <klarna-reconciler@users.noreply.github.com>"

commit=$(scripts/stamp-commit.sh)
swift build -c release --product klarna-reconciler --static-swift-stdlib --scratch-path "$SCRATCH"
BIN=$SCRATCH/release/klarna-reconciler
VERSION=$("$BIN" --version | awk '{ print $1 }')
echo "klarna-reconciler $VERSION, commit $commit"
if ldd "$BIN" | grep -q '/opt/swift\|libswift\|libFoundation\|libdispatch'; then
    echo "the binary still links the Swift runtime dynamically:" >&2; ldd "$BIN" >&2; exit 1
fi

rm -rf "$STAGE" && mkdir -p "$STAGE/DEBIAN"
install -D -m 0755 "$BIN" "$STAGE/usr/bin/klarna-reconciler"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$STAGE/usr/bin/klarna-reconciler"
# The units as shipped, with the package's paths instead of `make install`'s.
mkdir -p "$STAGE/lib/systemd/system"
for unit in klarna-reconciler.service klarna-reconciler.socket klarna-reconciler-control.socket; do
    sed -e 's#/usr/local/bin/#/usr/bin/#g' -e 's#/usr/local/share/doc/#/usr/share/doc/#g' \
        -e 's#Install with `make install` (units to /etc/systemd/system, sysusers.d and#Installed by the Debian package (units in /lib/systemd/system, sysusers.d and#' \
        -e 's#^\# tmpfiles.d beside them), then:#\# tmpfiles.d in /usr/lib); then:#' \
        "systemd/$unit" >"$STAGE/lib/systemd/system/$unit"
    chmod 0644 "$STAGE/lib/systemd/system/$unit"
done
install -D -m 0644 systemd/klarna-reconciler.sysusers "$STAGE/usr/lib/sysusers.d/klarna-reconciler.conf"
install -D -m 0644 systemd/klarna-reconciler.tmpfiles "$STAGE/usr/lib/tmpfiles.d/klarna-reconciler.conf"
install -D -m 0644 systemd/klarna-reconciler.catalog "$STAGE/usr/lib/systemd/catalog/klarna-reconciler.catalog"
# Shipped 0644 (the example holds no secret: secrets live in /etc/credstore); tmpfiles.d makes it 0640
# root:klarna-operators in postinst, so only the daemon and the operators read what the administrator writes into it.
install -D -m 0644 etc/config.yaml "$STAGE/etc/klarna-reconciler/config.yaml"
DOC=$STAGE/usr/share/doc/klarna-reconciler
install -D -m 0644 README.md "$DOC/README.md"
for doc in docs/*.md; do install -D -m 0644 "$doc" "$DOC/$doc"; done
install -D -m 0644 etc/nginx/klarna-reconciler.conf "$DOC/examples/nginx-klarna-reconciler.conf"
install -D -m 0644 etc/nginx/klarna-reconciler-log-format.conf "$DOC/examples/nginx-klarna-reconciler-log-format.conf"
install -D -m 0644 etc/prometheus/klarna-reconciler-rules.yml "$DOC/examples/prometheus-klarna-reconciler-rules.yml"
install -D -m 0644 etc/grafana/klarna-reconciler-dashboard.json "$DOC/examples/grafana-klarna-reconciler-dashboard.json"
install -D -m 0644 packaging/debian/copyright "$DOC/copyright"
install -D -m 0644 packaging/debian/lintian-overrides "$STAGE/usr/share/lintian/overrides/klarna-reconciler"
date=$(git log -1 --format=%aD 2>/dev/null || date -R)
printf 'klarna-reconciler (%s) unstable; urgency=medium\n\n  * Built from commit %s.\n\n -- %s  %s\n' \
    "$VERSION" "$commit" "$MAINTAINER" "$date" | gzip -9n >"$DOC/changelog.gz"
chmod 0644 "$DOC/changelog.gz"
mkdir -p "$STAGE/usr/share/man/man8"
# Generated from the argument parser's description of the commands, dated like the changelog.
scripts/man-page.py "$BIN" "$(date -d "$date" +%Y-%m-%d)" | gzip -9n >"$STAGE/usr/share/man/man8/klarna-reconciler.8.gz"
chmod 0644 "$STAGE/usr/share/man/man8/klarna-reconciler.8.gz"

# Depends: exactly the shared libraries the binary needs, as dpkg-shlibdeps names their packages.
SHLIBS=$(mktemp -d)
mkdir -p "$SHLIBS/debian" && printf 'Source: klarna-reconciler\n\nPackage: klarna-reconciler\nArchitecture: any\n' >"$SHLIBS/debian/control"
depends=$(cd "$SHLIBS" && dpkg-shlibdeps -O "$ROOT/$STAGE/usr/bin/klarna-reconciler" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
rm -rf "$SHLIBS"
[ -n "$depends" ] || { echo "dpkg-shlibdeps found no dependencies" >&2; exit 1; }

for script in postinst prerm postrm; do install -m 0755 "packaging/debian/$script" "$STAGE/DEBIAN/$script"; done
echo /etc/klarna-reconciler/config.yaml >"$STAGE/DEBIAN/conffiles"
(cd "$STAGE" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) >"$STAGE/DEBIAN/md5sums"
chmod 0644 "$STAGE/DEBIAN/conffiles" "$STAGE/DEBIAN/md5sums"
size=$(du -k -s --exclude=DEBIAN "$STAGE" | cut -f1)
sed -e "s/@VERSION@/$VERSION/" -e "s/@INSTALLED_SIZE@/$size/" -e "s/@DEPENDS@/$depends/" packaging/debian/control.in >"$STAGE/DEBIAN/control"

mkdir -p dist
DEB=dist/klarna-reconciler_${VERSION}_amd64.deb
dpkg-deb --root-owner-group --build "$STAGE" "$DEB" >/dev/null
echo "$DEB"
