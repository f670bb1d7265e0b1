#!/usr/bin/env bash
# Package tests: the .deb that `make deb` built, inspected, installed with apt on this host, run from the installed
# paths under a real systemd user manager with /opt/swift made inaccessible, then removed and purged; then installed
# over the previous release's .deb (built from its tag, scripts/previous-release-deb.sh) with payments open.
# Usage: Tests/Package/run.sh dist/klarna-reconciler_VERSION_amd64.deb path/to/klarna-sandbox
#        (needs root; `make check` runs it; the sandbox plays Klarna and is not in the package)
set -uo pipefail
DEB=$(realpath "$1")
SANDBOX_BIN=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
if [ "$(id -u)" != 0 ]; then echo "package tests: SKIPPED (apt install needs root)"; exit 0; fi
source "$HERE/../System/checks.sh"
PKG=klarna-reconciler
echo "package tests ($(basename "$DEB"), $(du -k "$DEB" | cut -f1) KiB)"

# --- 1. what is in the package ------------------------------------------------------------------------------------
echo "1. contents"
CONTENTS=$(dpkg-deb -c "$DEB" | awk '{ print $1, $2, $6 }')
INFO=$(dpkg-deb -I "$DEB")
for path in ./usr/bin/klarna-reconciler ./lib/systemd/system/klarna-reconciler.service ./lib/systemd/system/klarna-reconciler.socket \
    ./lib/systemd/system/klarna-reconciler-control.socket \
    ./usr/lib/sysusers.d/klarna-reconciler.conf ./usr/lib/tmpfiles.d/klarna-reconciler.conf \
    ./usr/lib/systemd/catalog/klarna-reconciler.catalog ./etc/klarna-reconciler/config.yaml \
    ./usr/share/doc/klarna-reconciler/copyright ./usr/share/doc/klarna-reconciler/changelog.gz \
    ./usr/share/doc/klarna-reconciler/README.md ./usr/share/man/man8/klarna-reconciler.8.gz \
    ./usr/share/doc/klarna-reconciler/docs/operations.md ./usr/share/doc/klarna-reconciler/docs/configuration.md \
    ./usr/share/doc/klarna-reconciler/examples/nginx-klarna-reconciler.conf \
    ./usr/share/doc/klarna-reconciler/examples/nginx-klarna-reconciler-log-format.conf \
    ./usr/share/doc/klarna-reconciler/examples/prometheus-klarna-reconciler-rules.yml \
    ./usr/share/doc/klarna-reconciler/examples/grafana-klarna-reconciler-dashboard.json; do
    check "has $path" grep -q " $path\$" <<<"$CONTENTS"
done
check "the Klarna sandbox's executable is not in the package (a test tool)" test -z "$(grep -E ' \./usr/bin/klarna-sandbox$' <<<"$CONTENTS")"
SANDBOX_CHECK=$(mktemp -d)
dpkg-deb --fsys-tarfile "$DEB" | tar -x -C "$SANDBOX_CHECK" ./usr/bin/klarna-reconciler
check "nor is its code in the daemon (no KlarnaSandbox type in the binary)" test "$(grep -c KlarnaSandbox "$SANDBOX_CHECK/usr/bin/klarna-reconciler")" = 0
rm -rf "$SANDBOX_CHECK"
check "everything is owned by root" test -z "$(awk '$2 != "root/root"' <<<"$CONTENTS")"
check "the example config is shipped 0644 (no secret in it)" grep -q '^-rw-r--r-- root/root ./etc/klarna-reconciler/config.yaml$' <<<"$CONTENTS"
check "nothing under /usr/local or /etc/systemd" test -z "$(grep -E ' \./(usr/local|etc/systemd)' <<<"$CONTENTS")"
DEPENDS=$(sed -n 's/^ Depends: //p' <<<"$INFO")
echo "  Depends: $DEPENDS"
check "Depends names libc, libcurl, libsystemd and libsqlite3" bash -c "grep -q 'libc6' <<<'$DEPENDS' && grep -q 'libcurl4' <<<'$DEPENDS' && grep -q 'libsystemd0' <<<'$DEPENDS' && grep -q 'libsqlite3-0' <<<'$DEPENDS'"
check "Depends names nothing of Swift" test -z "$(grep -i swift <<<"$DEPENDS")"
check "maintainer scripts: postinst, prerm, postrm; conffiles lists the config" \
    bash -c "grep -q postinst <<<'$INFO' && grep -q prerm <<<'$INFO' && grep -q postrm <<<'$INFO' && dpkg-deb -f '$DEB' Package >/dev/null && dpkg-deb --ctrl-tarfile '$DEB' | tar -xO ./conffiles | grep -qx /etc/klarna-reconciler/config.yaml"
EXTRACT=$(mktemp -d)
dpkg-deb -x "$DEB" "$EXTRACT"
LDD=$(ldd "$EXTRACT/usr/bin/klarna-reconciler")
check "ldd: no library from /opt/swift, no Swift runtime library" test -z "$(grep -E '/opt/swift|libswift|libFoundation|libdispatch|not found' <<<"$LDD")"
echo "  shared libraries: $(awk '{ print $1 }' <<<"$LDD" | tr '\n' ' ')"
rm -rf "$EXTRACT"

# --- 2. apt install: users, directories, nothing started ----------------------------------------------------------
echo "2. install"
if dpkg -s $PKG >/dev/null 2>&1; then apt-get purge -y -qq $PKG >/dev/null 2>&1; fi
check "apt install ./$(basename "$DEB")" apt-get install -y -qq "$DEB"
check "dpkg says installed" test "$(dpkg-query -W -f '${Status}' $PKG)" = "install ok installed"
check "the binary runs: $(/usr/bin/klarna-reconciler --version 2>&1 | cut -d';' -f1))" /usr/bin/klarna-reconciler --version
check "its version is the package's" test "$(/usr/bin/klarna-reconciler --version | awk '{ print $1 }')" = "$(dpkg-query -W -f '${Version}' $PKG)"
BUILT_FROM=$(git -C "$REPO" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
check "--version names the commit it was built from ($BUILT_FROM)" grep -q "(commit $BUILT_FROM" <<<"$(/usr/bin/klarna-reconciler --version)"
check "user klarna-reconciler exists (sysusers.d)" getent passwd klarna-reconciler
for group in klarna-ingest klarna-outbox klarna-operators; do check "group $group exists" getent group $group; done
check "spool new/ is 2770 klarna-reconciler:klarna-ingest (tmpfiles.d)" test "$(stat -c '%a %U:%G' /var/spool/klarna-reconciler/new)" = "2770 klarna-reconciler:klarna-ingest"
check "outbox is 2750 klarna-reconciler:klarna-outbox" test "$(stat -c '%a %U:%G' /var/spool/klarna-reconciler-outbox)" = "2750 klarna-reconciler:klarna-outbox"
check "outbox new/ and cur/ are 2770 (consumers acknowledge), tmp/ 2700" \
    test "$(stat -c %a /var/spool/klarna-reconciler-outbox/new /var/spool/klarna-reconciler-outbox/cur /var/spool/klarna-reconciler-outbox/tmp | tr '\n' ' ')" = "2770 2770 2700 "
check "the config is readable by the daemon and the operators only" test "$(stat -c '%a %U:%G' /etc/klarna-reconciler/config.yaml)" = "640 root:klarna-operators"
check "the man page is installed" test -s /usr/share/man/man8/klarna-reconciler.8.gz
check "the service is not enabled" test -z "$(find /etc/systemd/system -name 'klarna-reconciler*' 2>/dev/null)"
# Commands outside the unit find the credentials where the unit loads them from (/etc/credstore), and say where they
# looked when they are not there. Only files this test creates are removed again.
CREDSTORE=/etc/credstore/klarna-reconciler
CONFIG_OUT=$(/usr/bin/klarna-reconciler check-config 2>&1); CONFIG_RC=$?
if [ -e $CREDSTORE.klarna-password ]; then
    echo "  (skipped: this host has $CREDSTORE.klarna-password already)"
else
    check "check-config without credentials: exit 78" test "$CONFIG_RC" = 78
    check "  and it says where it looked" grep -q "looked in \$CREDENTIALS_DIRECTORY (not set: not inside the unit), klarna.password_file (not set), $CREDSTORE.klarna-password (not there)" <<<"$CONFIG_OUT"
    install -d -m 0700 /etc/credstore
    printf 'package-test-password\n' | install -m 0600 /dev/stdin $CREDSTORE.klarna-password
    head -c 32 /dev/urandom | base64 | install -m 0600 /dev/stdin $CREDSTORE.callback-key
    check "check-config as root finds the unit's credential files" bash -c "/usr/bin/klarna-reconciler check-config | grep -q 'klarna.password: <redacted> (file $CREDSTORE.klarna-password)'"
    check "callback-url signs with the unit's callback key" bash -c "/usr/bin/klarna-reconciler callback-url --kind hpp-status --kp-session kp-1 --base https://shop.example/cb | grep -q 'token='"
    # The README's worked example for shop backends, run as written, gives the token callback-url gives.
    EXAMPLE=$(sed -n '/^```python$/,/^```$/p' /usr/share/doc/klarna-reconciler/README.md | sed '1d;$d')
    FROM_CLI=$(/usr/bin/klarna-reconciler callback-url --kind kp-authorization --kp-session kp-42 --base https://shop.example/cb | sed -n 's/.*token=\([^&]*\).*/\1/p')
    FROM_EXAMPLE=$(python3 -c "$EXAMPLE
print(callback_token(open('$CREDSTORE.callback-key', 'rb').read(), 'kp-authorization', 'kp-42'))")
    check "the README's token example matches callback-url ($FROM_CLI)" test -n "$FROM_CLI" -a "$FROM_CLI" = "$FROM_EXAMPLE"
    check "the password appears nowhere in check-config" bash -c "! /usr/bin/klarna-reconciler check-config | grep -q package-test-password"
    rm -f $CREDSTORE.klarna-password $CREDSTORE.callback-key
    rmdir /etc/credstore 2>/dev/null || true
fi

# --- 3. the installed units under a real systemd user manager, /opt/swift inaccessible --------------------------
echo "3. the installed units, without /opt/swift"
# Klarna for the installed daemon, started out here: inside the namespaces, /opt/swift may be hidden, and the build's
# sandbox needs it. Sets SANDBOX_PORT and SANDBOX_DIR (its password file in it).
sandbox_up() {
    SANDBOX_DIR=$(mktemp -d)
    printf 'package-test-password-%s\n' "$RANDOM$RANDOM" >"$SANDBOX_DIR/password"
    SANDBOX_PORT=$(free_port)
    "$SANDBOX_BIN" --listen 127.0.0.1:$SANDBOX_PORT --username merchant --password-file "$SANDBOX_DIR/password" 2>"$SANDBOX_DIR/log" &
    SANDBOX_PID=$!
    for _ in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:$SANDBOX_PORT/_sandbox/clock && break; sleep 0.05; done
    check "the sandbox (Klarna for this test) answers" curl -sf -o /dev/null http://127.0.0.1:$SANDBOX_PORT/_sandbox/clock
}
sandbox_down() { kill "$SANDBOX_PID"; wait "$SANDBOX_PID" 2>/dev/null; rm -rf "$SANDBOX_DIR"; }
PRIVATE_MOUNTS=no
if command -v unshare >/dev/null && unshare --mount --propagation private sh -c 'mount -t tmpfs tmpfs /mnt' 2>/dev/null; then PRIVATE_MOUNTS=yes; fi
if [ $PRIVATE_MOUNTS = yes ]; then
    sandbox_up
    SANDBOX_PORT=$SANDBOX_PORT SANDBOX_PASSWORD_FILE=$SANDBOX_DIR/password \
        unshare --mount --propagation private "$HERE/units.sh" || FAILURES=$((FAILURES + $?))
    sandbox_down
else
    echo "  SKIPPED (no private mount namespace here)"
fi

# --- 4. remove keeps the configuration and the data; purge deletes them; the user stays (policy) ----------------
echo "4. remove and purge"
mkdir -p /var/lib/klarna-reconciler && echo kept >/var/lib/klarna-reconciler/state.sqlite
echo "# edited" >>/etc/klarna-reconciler/config.yaml
check "apt remove" apt-get remove -y -qq $PKG
check "the binary is gone" test ! -e /usr/bin/klarna-reconciler
check "the units are gone" test ! -e /lib/systemd/system/klarna-reconciler.service -a ! -e /lib/systemd/system/klarna-reconciler.socket -a ! -e /lib/systemd/system/klarna-reconciler-control.socket
check "the edited config stays after remove" grep -q "# edited" /etc/klarna-reconciler/config.yaml
check "the store stays after remove" test -e /var/lib/klarna-reconciler/state.sqlite
check "apt purge" apt-get purge -y -qq $PKG
check "dpkg no longer knows the package" bash -c "! dpkg -s $PKG >/dev/null 2>&1"
check "the config directory is gone" test ! -e /etc/klarna-reconciler
check "the store, spool and outbox are gone" test ! -e /var/lib/klarna-reconciler -a ! -e /var/spool/klarna-reconciler -a ! -e /var/spool/klarna-reconciler-outbox
LEFT=$(find /etc /usr /lib /var /opt /srv -xdev -name '*klarna-reconciler*' 2>/dev/null | grep -v -e '^/var/lib/dpkg/' -e '^/var/cache/apt/' -e '^/var/log/' -e "^$REPO" -e '^/opt/swift/' || true)
check "nothing of the package is left on the file system" test -z "$LEFT"
[ -n "$LEFT" ] && sed 's/^/      left: /' <<<"$LEFT"
check "the system user stays (Debian policy: never delete a uid that files may still carry)" getent passwd klarna-reconciler

# --- 5. an upgrade from the previous release, with payments open in every phase ----------------------------------
echo "5. upgrade from the previous release"
NEW_VERSION=$(dpkg-deb -f "$DEB" Version)
if [ $PRIVATE_MOUNTS = no ]; then
    echo "  SKIPPED (no private mount namespace here)"
elif PREVIOUS_DEB=$("$REPO/scripts/previous-release-deb.sh" "$NEW_VERSION"); then
    check "the previous release ($(basename "$PREVIOUS_DEB")) installs" apt-get install -y -qq "$PREVIOUS_DEB"
    sandbox_up
    NEW_DEB=$DEB SANDBOX_PORT=$SANDBOX_PORT SANDBOX_PASSWORD_FILE=$SANDBOX_DIR/password \
        unshare --mount --propagation private "$HERE/upgrade.sh" || FAILURES=$((FAILURES + $?))
    sandbox_down
    check "apt purge after the upgrade" apt-get purge -y -qq $PKG
else
    fail "the previous release's package could not be built (scripts/previous-release-deb.sh $NEW_VERSION)"
fi

echo
if [ "$FAILURES" -gt 0 ]; then echo "package tests: $FAILURES FAILED"; exit 1; fi
echo "package tests: all passed"
