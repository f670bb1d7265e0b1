#!/usr/bin/env bash
# Part 3 of the package tests, inside a private mount namespace (run.sh starts it): the units the package installed
# in /lib/systemd/system, run by a real systemd user manager in a namespace where /opt/swift is an empty tmpfs, so
# neither the daemon nor anything else here can load the toolchain's libraries. (InaccessiblePaths= in a drop-in would
# say the same per unit, but this user manager fails every unit that has it with 226/NAMESPACE, like ProtectHome=.)
# Klarna is the sandbox run.sh started outside this namespace (SANDBOX_PORT, SANDBOX_PASSWORD_FILE): it is a test
# tool, not in the package. Exits with the number of failures.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../System/harness.sh"
source "$HERE/../System/checks.sh"
source "$HERE/user-units.sh"
mount -t tmpfs -o mode=0755,size=1m tmpfs /opt/swift || { echo "  FAIL: cannot hide /opt/swift"; exit 1; }
trap 'world_down' EXIT
world_up || exit 1
BIN=/usr/bin/klarna-reconciler
mkdir -p "$W/credstore"
SPOOL=/var/spool/klarna-reconciler OUTBOX=/var/spool/klarna-reconciler-outbox CONFIG=/etc/klarna-reconciler/config.yaml
PORT=$SANDBOX_PORT
cp "$SANDBOX_PASSWORD_FILE" "$W/credstore/klarna-password"
printf 'package-test-callback-key-%s\n' "$RANDOM$RANDOM" >"$W/credstore/callback-key"
echo '{}' >"$W/credstore/webhook-signing-keys"

cat >"$UNITS/toolchain-probe.service" <<'UNIT'
[Service]
Type=oneshot
ExecStart=/bin/sh -c '! ls /opt/swift/usr/lib/swift/linux/libswiftCore.so'
UNIT
# The installed config file (0640 root:klarna-operators, from tmpfiles.d), written over as an administrator would:
# its mode and group stay.
cat >"$CONFIG" <<YAML
klarna:
  base_url: http://127.0.0.1:$PORT
  username: merchant
polling:
  dense_interval_seconds: 0.2
YAML
user_units "$W/credstore"
check "the installed unit runs the installed binary" grep -q "^ExecStart=/usr/bin/klarna-reconciler run" "$UNITS/klarna-reconciler.service"

check "a unit here cannot see the Swift runtime in /opt/swift" systemctl --user start toolchain-probe.service
check "the installed binary runs without it" $BIN --version
check "the daemon's sockets start" systemctl --user start klarna-reconciler.socket klarna-reconciler-control.socket
check "the ingest socket is 0660 root:klarna-ingest" test "$(stat -c '%a %U:%G' /run/klarna-reconciler.sock)" = "660 root:klarna-ingest"
check "the operators' socket is 0660 root:klarna-operators" test "$(stat -c '%a %U:%G' /run/klarna-reconciler-control.sock)" = "660 root:klarna-operators"
HPP_KP=$(curl -sS --max-time 10 http://127.0.0.1:$PORT/_sandbox/sessions -H 'Content-Type: application/json' \
    -d '{"place_order_mode": "NONE", "merchant_reference": "package-test", "schedule": [{"after_seconds": 0.3, "status": "COMPLETED"}]}' \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["hpp_session_id"], d["kp_session_id"])')
read -r HPP KP <<<"$HPP_KP"
STATUS=$(curl -sS --max-time 30 --unix-socket /run/klarna-reconciler.sock -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
    -X POST http://localhost/v1/sessions -d "{\"hpp_session_id\": \"$HPP\", \"kp_session_id\": \"$KP\", \"place_order_mode\": \"NONE\", \"merchant_reference\": \"package-test\"}")
check "a payment tracked through the socket is accepted (202), starting the daemon" test "$STATUS" = 202
captured() { grep -l "\"captured\"" $OUTBOX/new/* 2>/dev/null | xargs -r grep -l "$HPP" | grep -q .; }
wait_for 30 "the payment captured (outbox)" captured && echo "  ok: the payment ended captured, run by the installed daemon"
check "the daemon is active and was never restarted" test "$(systemctl --user show klarna-reconciler.service -p ActiveState --value) $(systemctl --user show klarna-reconciler.service -p NRestarts --value)" = "active 0"
[ "$(systemctl --user show klarna-reconciler.service -p ActiveState --value)" = active ] || journalctl --no-pager -n 15 -o cat | sed 's/^/      journal: /'
check "journald has its READY line" bash -c "journalctl --no-pager -o cat | grep -q '^klarna-reconciler .* ready: '"
source "$HERE/permissions.sh"
systemctl --user stop klarna-reconciler.service klarna-reconciler.socket klarna-reconciler-control.socket
exit "$FAILURES"
